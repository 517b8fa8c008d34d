/* What the C test programs share: CHECK, which prints "ok <name>" or
 * "FAIL <name>: ..." and counts failures; opening the first device; an RC
 * QP brought to RTS towards a peer; waiting for one completion. Each
 * program ends with printf("%d failed\n", failures). */
#ifndef DOORBELL_TEST_CHECK_H
#define DOORBELL_TEST_CHECK_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(name, cond, ...)                                                  \
	do {                                                                    \
		if (cond) {                                                     \
			printf("ok %s\n", name);                               \
		} else {                                                        \
			printf("FAIL %s: ", name);                              \
			printf(__VA_ARGS__);                                    \
			printf("\n");                                          \
			failures++;                                             \
		}                                                               \
	} while (0)

/* The first device, opened; exits 2 if there is none. */
static inline struct ibv_context *open_first(const char *which)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		printf("FAIL no device\n");
		exit(2);
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!ctx) {
		printf("FAIL open %s: %s\n", which, strerror(errno));
		exit(2);
	}
	return ctx;
}

/* RC timers and depths for rc_to_rts_with(). */
struct rc_opts {
	uint8_t rd_atomic;     /* max_rd_atomic and max_dest_rd_atomic */
	uint8_t timeout;       /* 4.096 us x 2^timeout */
	uint8_t min_rnr_timer; /* IBTA's RNR timer code */
};

/* An RC QP through INIT (with `access`) and RTR to RTS, towards QP `dest`
 * at `gid`, both PSNs 0, retrying 7 times (RNR: 7, for ever). */
static inline int rc_to_rts_with(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid,
				 unsigned int access, struct rc_opts o)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				.qp_access_flags = access};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = o.rd_atomic;
	a.min_rnr_timer = o.min_rnr_timer;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					  IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = o.timeout;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = o.rd_atomic;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* rc_to_rts_with() one READ or atomic at a time, a 67 ms timeout and a
 * 0.64 ms RNR wait. */
static inline int rc_to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid,
			    unsigned int access)
{
	struct rc_opts o = {.rd_atomic = 1, .timeout = 14, .min_rnr_timer = 12};
	return rc_to_rts_with(qp, dest, gid, access, o);
}

/* Polls `cq` for one completion; returns what ibv_poll_cq last returned
 * (0 if none came in a long while). */
static inline int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < 200000000; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n;
	}
	return 0;
}

#endif
