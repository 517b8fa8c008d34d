/* The device clock as a program sees it: ibv_query_rt_values_ex reads it,
 * an extended CQ stamps each completion with it and with the wall-clock
 * time it stands for, and the two agree with the host's clocks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "check.h"

static uint64_t now_ns(clockid_t id)
{
	struct timespec t;
	clock_gettime(id, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t raw_clock(struct ibv_context *ctx, int *rc)
{
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	*rc = ibv_query_rt_values_ex(ctx, &v);
	if (*rc || v.comp_mask != IBV_VALUES_MASK_RAW_CLOCK || v.raw_clock.tv_sec != 0)
		*rc = *rc ? *rc : -1;
	return (uint64_t)v.raw_clock.tv_nsec;
}

int main(void)
{
	struct ibv_context *ctx = open_first("doorbell");
	if (!ctx)
		return 1;
	struct ibv_device_attr_ex dev;
	CHECK("query_device_ex", ibv_query_device_ex(ctx, NULL, &dev) == 0 && dev.hca_core_clock > 0,
	      "hca_core_clock %llu", (unsigned long long)dev.hca_core_clock);
	uint64_t khz = dev.hca_core_clock;

	/* The raw clock runs at hca_core_clock: over a 20 ms sleep it moves by
	 * 20 ms worth of ticks, give or take the machine's noise. */
	int rc1, rc2;
	uint64_t t0 = now_ns(CLOCK_MONOTONIC), c0 = raw_clock(ctx, &rc1);
	struct timespec nap = {.tv_nsec = 20 * 1000 * 1000};
	nanosleep(&nap, NULL);
	uint64_t c1 = raw_clock(ctx, &rc2), t1 = now_ns(CLOCK_MONOTONIC);
	double ticks_per_ns = (double)khz / 1e6;
	double ran = (double)(c1 - c0) / ticks_per_ns, slept = (double)(t1 - t0);
	CHECK("raw_clock", rc1 == 0 && rc2 == 0 && c1 > c0, "rc %d %d, %llu then %llu", rc1, rc2,
	      (unsigned long long)c0, (unsigned long long)c1);
	CHECK("raw_clock_rate", ran > 0.5 * slept && ran < 1.5 * slept + 5e6,
	      "the device clock ran %.0f ns while the host's ran %.0f", ran, slept);
	struct ibv_values_ex bad = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK << 1};
	CHECK("rt_values_unknown_mask", ibv_query_rt_values_ex(ctx, &bad) == EINVAL, "");

	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 0, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 16,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
	};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
	CHECK("create_cq_ex_wallclock", cq != NULL, "errno %d", errno);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr ia = {.send_cq = ibv_cq_ex_to_cq(cq),
				      .recv_cq = ibv_cq_ex_to_cq(cq),
				      .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *a = cq ? ibv_create_qp(pd, &ia) : NULL;
	struct ibv_qp *b = cq ? ibv_create_qp(pd, &ia) : NULL;
	CHECK("setup", mr && a && b && rc_to_rts(a, b->qp_num, gid, IBV_ACCESS_LOCAL_WRITE) == 0 &&
			       rc_to_rts(b, a->qp_num, gid, IBV_ACCESS_LOCAL_WRITE) == 0,
	      "errno %d", errno);
	if (failures) {
		printf("%d failed\n", failures);
		return 1;
	}

	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad_r;
	struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
			   *bad_s;
	uint64_t before = now_ns(CLOCK_REALTIME);
	int rc3;
	uint64_t raw_before = raw_clock(ctx, &rc3);
	ibv_post_recv(b, &rw, &bad_r);
	ibv_post_send(a, &sw, &bad_s);
	int seen = 0;
	uint64_t ts[2] = {0, 0}, wall[2] = {0, 0};
	struct ibv_poll_cq_attr pa = {0};
	for (long spin = 0; seen < 2 && spin < 200000000; spin++) {
		if (ibv_start_poll(cq, &pa) != 0)
			continue;
		do {
			if (seen < 2) {
				ts[seen] = ibv_wc_read_completion_ts(cq);
				wall[seen] = ibv_wc_read_completion_wallclock_ns(cq);
				seen++;
			}
		} while (ibv_next_poll(cq) == 0);
		ibv_end_poll(cq);
	}
	uint64_t after = now_ns(CLOCK_REALTIME);
	CHECK("two_completions", seen == 2, "%d", seen);
	for (int i = 0; i < 2; i++) {
		CHECK("stamp_after_post", ts[i] >= raw_before && rc3 == 0, "ts %llu, raw clock %llu before",
		      (unsigned long long)ts[i], (unsigned long long)raw_before);
		/* A millisecond of slack for the clocks' two readings at start. */
		CHECK("wallclock_in_the_window", wall[i] + 1000000 >= before && wall[i] <= after + 1000000,
		      "wallclock %llu outside [%llu, %llu]", (unsigned long long)wall[i],
		      (unsigned long long)before, (unsigned long long)after);
	}
	/* The two readings of one completion are the same moment. */
	double apart = (double)(wall[1] - wall[0]) - (double)(ts[1] - ts[0]) / ticks_per_ns;
	CHECK("wallclock_follows_the_device_clock", apart > -1.0 && apart < 1.0, "%.1f ns apart",
	      apart);

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	CHECK("close", ibv_close_device(ctx) == 0, "");
	printf("%d failed\n", failures);
	return failures != 0;
}
