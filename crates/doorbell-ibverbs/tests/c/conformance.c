/* One fixed sequence of posts, run once on doorbell's own provider and once
 * on rdma-core's libmlx5 (DOORBELL_PROVIDER=mlx5) with a capture of the
 * host interface (DOORBELL_HIF_LOG): the test compares the WQEs, the
 * register stores and the CQEs the device saw in the two runs. The
 * sequence covers every opcode, inline and by pointer, signalled or not,
 * postlists, several SGEs, and UD with an address handle and immediate
 * data. Buffers sit at a fixed address so that both runs use the same
 * addresses. Each step waits for its completions, so the captures come in
 * the same order. Prints "ok <name>" or "FAIL <name>: ..."; exits 0 only
 * if all passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"

#define BUF_AT ((void *)0x7e0000000000ull)
#define BUF_LEN (1u << 20)
#define QKEY 0x11111111
#define ACCESS                                                                                 \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |           \
	 IBV_ACCESS_REMOTE_ATOMIC)

static struct ibv_mr *mr;
static char *buf;

static struct ibv_sge sge(uint32_t off, uint32_t len)
{
	struct ibv_sge s = {.addr = (uintptr_t)(buf + off), .length = len, .lkey = mr->lkey};
	return s;
}

/* Waits until `n` completions came on `cq`, all successful. */
static int completions(struct ibv_cq *cq, int n)
{
	struct ibv_wc wc;
	for (int i = 0; i < n; i++) {
		if (wait_wc(cq, &wc) != 1 || wc.status != IBV_WC_SUCCESS) {
			printf("FAIL completion %d of %d: status %d\n", i, n, (int)wc.status);
			failures++;
			return -1;
		}
	}
	return 0;
}

static int ud_to_rts(struct ibv_qp *qp)
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

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
			      enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = {.send_cq = scq, .recv_cq = rcq, .qp_type = type,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16,
					      .max_send_sge = 4, .max_recv_sge = 4,
					      .max_inline_data = 32}};
	return ibv_create_qp(pd, &ia);
}

static int post(struct ibv_qp *qp, struct ibv_send_wr *w)
{
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, w, &bad);
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	buf = mmap(BUF_AT, BUF_LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (buf != BUF_AT) {
		printf("FAIL buffer at %p: %s\n", BUF_AT, strerror(errno));
		return 2;
	}
	for (uint32_t i = 0; i < BUF_LEN; i++)
		buf[i] = (char)(i * 7 + 3);
	struct ibv_context *ctx = open_first("first");
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 0, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	mr = ibv_reg_mr(pd, buf, BUF_LEN, ACCESS);
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *a = make_qp(pd, scq, rcq, IBV_QPT_RC);
	struct ibv_qp *b = make_qp(pd, scq, rcq, IBV_QPT_RC);
	struct ibv_qp *ua = make_qp(pd, scq, rcq, IBV_QPT_UD);
	struct ibv_qp *ub = make_qp(pd, scq, rcq, IBV_QPT_UD);
	CHECK("setup", pd && mr && scq && rcq && a && b && ua && ub, "errno %d", errno);
	if (failures)
		return 1;
	/* The test needs to know which QPs are UD (their address vectors). */
	fprintf(stderr, "ud_qpn %u\nud_qpn %u\n", ua->qp_num, ub->qp_num);
	CHECK("connect", !rc_to_rts(a, b->qp_num, gid, ACCESS) &&
				 !rc_to_rts(b, a->qp_num, gid, ACCESS) && !ud_to_rts(ua) &&
				 !ud_to_rts(ub),
	      "errno %d", errno);

	/* Receives for every SEND and WRITE with immediate to come: 8 on b,
	 * 1 on ub (its GRH first). */
	for (int i = 0; i < 8; i++) {
		struct ibv_sge s = sge(0x80000 + i * 0x1000, 0x1000);
		struct ibv_recv_wr r = {.wr_id = 100 + i, .sg_list = &s, .num_sge = 1}, *bad;
		CHECK("post_recv", !ibv_post_recv(b, &r, &bad), "errno %d", errno);
	}
	{
		struct ibv_sge s = sge(0x90000, 40 + 256);
		struct ibv_recv_wr r = {.wr_id = 200, .sg_list = &s, .num_sge = 1}, *bad;
		CHECK("post_recv_ud", !ibv_post_recv(ub, &r, &bad), "errno %d", errno);
	}
	uint64_t remote = (uintptr_t)(buf + 0x40000);
	uint32_t rkey = mr->rkey;

	/* 1. SEND by pointer; 2. SEND inline; 3. SEND with immediate. */
	struct ibv_sge s1 = sge(0x100, 64);
	struct ibv_send_wr w1 = {.wr_id = 1, .sg_list = &s1, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	CHECK("send", !post(a, &w1) && !completions(scq, 1) && !completions(rcq, 1), "%d",
	      errno);
	struct ibv_sge s2 = sge(0x200, 16);
	struct ibv_send_wr w2 = {.wr_id = 2, .sg_list = &s2, .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	CHECK("send_inline", !post(a, &w2) && !completions(scq, 1) && !completions(rcq, 1),
	      "%d", errno);
	struct ibv_sge s3 = sge(0x300, 32);
	struct ibv_send_wr w3 = {.wr_id = 3, .sg_list = &s3, .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				 .imm_data = htobe32(0x12345678)};
	CHECK("send_imm", !post(a, &w3) && !completions(scq, 1) && !completions(rcq, 1), "%d",
	      errno);

	/* 4. RDMA WRITE; 5. a postlist: an unsignalled inline WRITE, then a
	 * signalled WRITE with immediate. */
	struct ibv_sge s4 = sge(0x400, 128);
	struct ibv_send_wr w4 = {.wr_id = 4, .sg_list = &s4, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = remote, .rkey = rkey}};
	CHECK("write", !post(a, &w4) && !completions(scq, 1), "%d", errno);
	struct ibv_sge s5b = sge(0x600, 64), s5a = sge(0x500, 8);
	struct ibv_send_wr w5b = {.wr_id = 52, .sg_list = &s5b, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(0xabcd),
				  .wr.rdma = {.remote_addr = remote + 0x100, .rkey = rkey}};
	struct ibv_send_wr w5a = {.wr_id = 51, .next = &w5b, .sg_list = &s5a, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_INLINE,
				  .wr.rdma = {.remote_addr = remote + 0x80, .rkey = rkey}};
	CHECK("write_postlist", !post(a, &w5a) && !completions(scq, 1) && !completions(rcq, 1),
	      "%d", errno);

	/* 6. RDMA READ; 7. the two atomics. */
	struct ibv_sge s6 = sge(0x1000, 256);
	struct ibv_send_wr w6 = {.wr_id = 6, .sg_list = &s6, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = remote + 0x200, .rkey = rkey}};
	CHECK("read", !post(a, &w6) && !completions(scq, 1), "%d", errno);
	struct ibv_sge s7 = sge(0x2000, 8);
	struct ibv_send_wr w7 = {.wr_id = 7, .sg_list = &s7, .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.atomic = {.remote_addr = remote + 0x400, .rkey = rkey,
					       .compare_add = 0, .swap = 0x1111}};
	CHECK("cmp_swap", !post(a, &w7) && !completions(scq, 1), "%d", errno);
	struct ibv_sge s8 = sge(0x2008, 8);
	struct ibv_send_wr w8 = {.wr_id = 8, .sg_list = &s8, .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.atomic = {.remote_addr = remote + 0x408, .rkey = rkey,
					       .compare_add = 5}};
	CHECK("fetch_add", !post(a, &w8) && !completions(scq, 1), "%d", errno);

	/* 8. A postlist of three SENDs, the last signalled; 9. one SEND of
	 * three SGEs. */
	struct ibv_sge s9[3] = {sge(0x3000, 20), sge(0x3100, 40), sge(0x3200, 60)};
	struct ibv_send_wr w9c = {.wr_id = 93, .sg_list = &s9[2], .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr w9b = {.wr_id = 92, .next = &w9c, .sg_list = &s9[1], .num_sge = 1,
				  .opcode = IBV_WR_SEND};
	struct ibv_send_wr w9a = {.wr_id = 91, .next = &w9b, .sg_list = &s9[0], .num_sge = 1,
				  .opcode = IBV_WR_SEND};
	CHECK("send_postlist", !post(a, &w9a) && !completions(scq, 1) && !completions(rcq, 3),
	      "%d", errno);
	struct ibv_sge s10[3] = {sge(0x4000, 10), sge(0x4100, 20), sge(0x4200, 30)};
	struct ibv_send_wr w10 = {.wr_id = 10, .sg_list = s10, .num_sge = 3,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	CHECK("send_sges", !post(a, &w10) && !completions(scq, 1) && !completions(rcq, 1),
	      "%d", errno);

	/* 10. UD: a SEND with immediate through an address handle. */
	struct ibv_ah_attr ahattr = {.is_global = 1, .port_num = 1,
				     .grh = {.dgid = gid, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(pd, &ahattr);
	struct ibv_sge s11 = sge(0x5000, 100);
	struct ibv_send_wr w11 = {.wr_id = 11, .sg_list = &s11, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				  .imm_data = htobe32(0x55aa),
				  .wr.ud = {.ah = ah, .remote_qpn = ub->qp_num,
					    .remote_qkey = QKEY}};
	CHECK("ud_send_imm", ah && !post(ua, &w11) && !completions(scq, 1) &&
				     !completions(rcq, 1),
	      "%d", errno);

	ibv_destroy_ah(ah);
	ibv_destroy_qp(ub);
	ibv_destroy_qp(ua);
	ibv_destroy_qp(b);
	ibv_destroy_qp(a);
	ibv_destroy_cq(rcq);
	ibv_destroy_cq(scq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("%d failed\n", failures);
	return failures != 0;
}
