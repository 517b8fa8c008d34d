/* A UD server's reply path: the receiver of a UD message builds an address
 * handle from its work completion and the 40 bytes before the payload
 * (ibv_init_ah_from_wc, ibv_create_ah_from_wc) and answers through it.
 * Two UD QPs of one process on one NIC; the sender is the process itself.
 * Prints "ok <name>" per check and "FAIL <name>: ..."; exits 0 only if
 * every check passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define QKEY 0x11111111
#define GRH 40

static int to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				.qkey = QKEY};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static int post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *at, uint64_t id)
{
	struct ibv_sge s = {.addr = (uintptr_t)at, .length = GRH + 64, .lkey = mr->lkey};
	struct ibv_recv_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
	return ibv_post_recv(qp, &w, &bad);
}

static int send_to(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, struct ibv_mr *mr,
		   char *at, uint64_t id)
{
	struct ibv_sge s = {.addr = (uintptr_t)at, .length = 16, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1,
				.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
				.wr.ud = {.ah = ah, .remote_qpn = qpn, .remote_qkey = QKEY}},
			   *bad;
	return ibv_post_send(qp, &w, &bad);
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct ibv_context *ctx = open_first("first");
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 0, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
	CHECK("setup", pd && cq && mr && a && b && !to_rts(a) && !to_rts(b), "errno %d", errno);

	/* a -> b, through an AH made from the GID. */
	struct ibv_ah_attr to_b = {.is_global = 1, .port_num = 1,
				   .grh = {.dgid = gid, .sgid_index = 0, .hop_limit = 64}};
	struct ibv_ah *ah_b = ibv_create_ah(pd, &to_b);
	char *b_recv = buf + 1024, *a_recv = buf + 2048;
	strcpy(buf, "question");
	CHECK("send", ah_b && !post_recv(b, mr, b_recv, 1) && !post_recv(a, mr, a_recv, 2) &&
			      !send_to(a, ah_b, b->qp_num, mr, buf, 3),
	      "errno %d", errno);
	struct ibv_wc wc, got = {0};
	for (int i = 0; i < 2 && wait_wc(cq, &wc) == 1; i++)
		if (wc.wr_id == 1)
			got = wc;
	CHECK("received", got.status == IBV_WC_SUCCESS && (got.wc_flags & IBV_WC_GRH) &&
				  got.src_qp == a->qp_num && !strcmp(b_recv + GRH, "question"),
	      "status %d flags %#x src_qp %#x", got.status, got.wc_flags, got.src_qp);

	/* The path back, from what arrived. */
	struct ibv_grh *grh = (struct ibv_grh *)b_recv;
	struct ibv_ah_attr back;
	memset(&back, 0xab, sizeof back);
	int r = ibv_init_ah_from_wc(ctx, 1, &got, grh, &back);
	CHECK("init_ah_from_wc", r == 0 && back.is_global == 1 && back.port_num == 1 &&
					 !memcmp(&back.grh.dgid, &gid, 16) &&
					 back.grh.sgid_index == 0 && back.grh.hop_limit > 0 &&
					 back.grh.flow_label == 0,
	      "ret %d errno %d global %d sgid_index %d hop %d", r, errno, back.is_global,
	      back.grh.sgid_index, back.grh.hop_limit);

	/* b answers a through an AH made from the completion. */
	struct ibv_ah *ah_a = ibv_create_ah_from_wc(pd, &got, grh, 1);
	strcpy(buf + 512, "answer");
	CHECK("create_ah_from_wc", ah_a && !send_to(b, ah_a, got.src_qp, mr, buf + 512, 4),
	      "errno %d", errno);
	memset(&got, 0, sizeof got);
	for (int i = 0; i < 2 && wait_wc(cq, &wc) == 1; i++)
		if (wc.wr_id == 2)
			got = wc;
	CHECK("answered", got.status == IBV_WC_SUCCESS && got.src_qp == b->qp_num &&
				  !strcmp(a_recv + GRH, "answer"),
	      "status %d src_qp %#x", got.status, got.src_qp);

	/* What has no path back. */
	struct ibv_grh bad = *grh;
	errno = 0;
	CHECK("bad_port", ibv_init_ah_from_wc(ctx, 2, &wc, &bad, &back) == -1 && errno == EINVAL,
	      "errno %d", errno);
	errno = 0;
	CHECK("null_grh", ibv_init_ah_from_wc(ctx, 1, &wc, NULL, &back) == -1 && errno == EINVAL,
	      "errno %d", errno);
	wc.wc_flags = IBV_WC_GRH;
	memset(&bad, 0, sizeof bad);
	errno = 0;
	CHECK("not_ip", ibv_init_ah_from_wc(ctx, 1, &wc, &bad, &back) == -1 &&
				errno == EPROTONOSUPPORT,
	      "errno %d", errno);
	bad = *grh;
	((unsigned char *)&bad)[36] = 239; /* sent to a multicast group */
	errno = 0;
	CHECK("multicast", ibv_init_ah_from_wc(ctx, 1, &wc, &bad, &back) == -1 && errno == EINVAL,
	      "errno %d", errno);
	errno = 0;
	CHECK("create_from_bad_wc", !ibv_create_ah_from_wc(pd, &wc, &bad, 1) && errno == EINVAL,
	      "errno %d", errno);

	ibv_destroy_ah(ah_a);
	ibv_destroy_ah(ah_b);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	printf("%d failed\n", failures);
	return failures != 0;
}
