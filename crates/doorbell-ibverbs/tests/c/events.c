/* Completion channels and the async event queue are real file descriptors:
 * poll() sees an event arrive, a non-blocking fd answers EAGAIN, arming is
 * one-shot, destroying a CQ waits for its events to be acknowledged. Built
 * by the tests against <infiniband/verbs.h>, run on doorbell. Prints
 * "ok <name>" or "FAIL <name>: ..."; exits 0 only if all passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

static volatile sig_atomic_t alarmed;

static void on_alarm(int sig)
{
	(void)sig;
	alarmed = 1;
}

static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 0, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK("channel_fd", ch && ch->fd >= 0 && fcntl(ch->fd, F_GETFD) >= 0, "fd");
	CHECK("async_fd", ctx->async_fd >= 0 && fcntl(ctx->async_fd, F_GETFD) >= 0, "fd %d",
	      ctx->async_fd);
	CHECK("async_fd_quiet", !readable(ctx->async_fd, 0), "an async event at start");
	int tag = 42;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, &tag, ch, 0);
	struct ibv_cq *plain = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	/* A signal ends a blocked ibv_get_cq_event with EINTR, as rdma-core's
	 * read() of the channel does (qperf stops its tests so): the signal
	 * reaches the program's thread, not one of the library's. */
	struct sigaction sa = {.sa_handler = on_alarm}; /* no SA_RESTART */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	ualarm(200000, 0);
	struct ibv_cq *ecq0 = NULL;
	void *ectx0 = NULL;
	errno = 0;
	int r0 = ibv_get_cq_event(ch, &ecq0, &ectx0);
	CHECK("get_cq_event_eintr", r0 == -1 && errno == EINTR && alarmed, "r %d errno %d alarmed %d",
	      r0, errno, (int)alarmed);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = plain, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *a = ibv_create_qp(pd, &ia);
	struct ibv_qp *b = ibv_create_qp(pd, &ia);
	CHECK("setup", cq && plain && mr && a && b && rc_to_rts(a, b->qp_num, gid, IBV_ACCESS_LOCAL_WRITE) == 0 &&
			       rc_to_rts(b, a->qp_num, gid, IBV_ACCESS_LOCAL_WRITE) == 0,
	      "errno %d", errno);

	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad_r;
	struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
			   *bad_s;

	/* A non-blocking channel with nothing in it answers EAGAIN. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	errno = 0;
	CHECK("nonblocking_eagain", ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN,
	      "errno %d", errno);

	/* Armed: one completion makes the fd readable, and the event names the
	 * CQ and its context. */
	ibv_req_notify_cq(cq, 0);
	ibv_post_recv(b, &rw, &bad_r);
	ibv_post_send(a, &sw, &bad_s);
	CHECK("poll_sees_the_event", readable(ch->fd, 5000), "not readable in 5 s");
	CHECK("get_cq_event", ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq &&
				      ev_ctx == &tag,
	      "cq %p ctx %p", (void *)ev_cq, ev_ctx);
	CHECK("drained", !readable(ch->fd, 0), "still readable");
	struct ibv_wc wc;
	while (ibv_poll_cq(cq, 1, &wc) == 0)
		;
	CHECK("the_completion", wc.wr_id == 2 && wc.status == IBV_WC_SUCCESS, "wr %llu",
	      (unsigned long long)wc.wr_id);

	/* Not re-armed: the next completion raises no event. */
	ibv_post_recv(b, &rw, &bad_r);
	ibv_post_send(a, &sw, &bad_s);
	while (ibv_poll_cq(cq, 1, &wc) == 0)
		;
	CHECK("arming_is_one_shot", !readable(ch->fd, 200), "an event without arming");

	/* Re-armed, then destroyed after acknowledging. */
	ibv_req_notify_cq(cq, 0);
	ibv_post_recv(b, &rw, &bad_r);
	ibv_post_send(a, &sw, &bad_s);
	CHECK("rearmed", readable(ch->fd, 5000), "no event after re-arming");
	CHECK("second_event", ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0, "errno %d", errno);
	ibv_ack_cq_events(cq, 2);
	CHECK("acked", cq->comp_events_completed == 2, "comp_events_completed %u",
	      cq->comp_events_completed);
	CHECK("destroy_qps", ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "");
	CHECK("destroy_channel_in_use", ibv_destroy_comp_channel(ch) == EBUSY, "");
	CHECK("destroy_cq", ibv_destroy_cq(cq) == 0, "");
	CHECK("destroy_channel", ibv_destroy_comp_channel(ch) == 0, "");
	ibv_destroy_cq(plain);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	/* Every context's dispatcher waits on the process's one NIC: closing
	 * one beside others must not wait for a wake-up another took. */
	{
		struct ibv_device **l = ibv_get_device_list(&n);
		struct ibv_context *more[4];
		for (int i = 0; i < 4; i++)
			more[i] = ibv_open_device(l[0]);
		ibv_free_device_list(l);
		double worst = 0;
		for (int i = 0; i < 4; i++) {
			struct timespec t0, t1;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			ibv_close_device(more[i]);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
			if (ms > worst)
				worst = ms;
		}
		CHECK("close_beside_others", worst < 500, "a close took %.0f ms", worst);
	}
	CHECK("close", ibv_close_device(ctx) == 0, "");
	printf("%d failed\n", failures);
	return failures != 0;
}
