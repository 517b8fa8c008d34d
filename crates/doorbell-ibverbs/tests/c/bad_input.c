/* Bad input through the C API: each call gets the errno rdma-core (or the
 * kernel) would give, and nothing else breaks. Built by the tests against
 * the installed <infiniband/verbs.h>; run on doorbell's libibverbs.so.1.
 * Prints "ok <name>" per check and "FAIL <name>: ..." for a failed one;
 * exits 0 only if every check passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

#define FULL_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define to_rts(qp, dest, gid) rc_to_rts(qp, dest, gid, FULL_ACCESS)

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct ibv_context *ctx = open_first("first");
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 0, &gid);

	/* Queries with bad arguments. */
	struct ibv_port_attr pa;
	CHECK("query_port_bad_port", ibv_query_port(ctx, 2, &pa) == EINVAL, "port 2");
	errno = 0;
	CHECK("query_gid_bad_index", ibv_query_gid(ctx, 1, -1, &gid) == -1 && errno == EINVAL,
	      "errno %d", errno);
	ibv_query_gid(ctx, 1, 0, &gid);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK("setup", pd && cq, "pd %p cq %p", (void *)pd, (void *)cq);

	/* CQ sizes and vectors. */
	errno = 0;
	CHECK("create_cq_zero", !ibv_create_cq(ctx, 0, NULL, NULL, 0) && errno == EINVAL,
	      "errno %d", errno);
	errno = 0;
	CHECK("create_cq_huge", !ibv_create_cq(ctx, 1 << 30, NULL, NULL, 0) && errno == EINVAL,
	      "errno %d", errno);

	/* Registration. */
	char *buf = malloc(1 << 16);
	errno = 0;
	CHECK("reg_mr_unknown_flag", !ibv_reg_mr(pd, buf, 4096, 1 << 30) && errno == EINVAL,
	      "errno %d", errno);
	errno = 0;
	CHECK("reg_mr_remote_write_needs_local_write",
	      !ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL,
	      "errno %d", errno);
	char *gone = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, 8192);
	errno = 0;
	CHECK("reg_mr_unmapped", !ibv_reg_mr(pd, gone, 8192, IBV_ACCESS_LOCAL_WRITE) &&
					 errno == EFAULT,
	      "errno %d", errno);
	errno = 0;
	CHECK("reg_mr_zero_length", !ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE) &&
					    errno == EINVAL,
	      "errno %d", errno);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 1 << 16,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ);
	CHECK("reg_mr", mr != NULL, "errno %d", errno);

	/* Re-registration: libibverbs' input checks, then the provider's. */
	uint32_t rkey = mr->rkey;
	errno = 0;
	CHECK("rereg_unknown_flag", ibv_rereg_mr(mr, 1 << 4, NULL, NULL, 0, 0) ==
					    IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "errno %d", errno);
	errno = 0;
	CHECK("rereg_access_without_its_flag",
	      ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE) ==
			      IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "errno %d", errno);
	errno = 0;
	CHECK("rereg_translation_without_a_range",
	      ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) ==
			      IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "errno %d", errno);
	errno = 0;
	CHECK("rereg_to_an_unmapped_range",
	      ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, gone, 8192, 0) ==
			      IBV_REREG_MR_ERR_CMD && errno == EFAULT && mr->addr == buf,
	      "errno %d", errno);
	CHECK("rereg_pd", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0) == 0 &&
				  mr->pd == pd && mr->rkey == rkey,
	      "errno %d", errno);
	CHECK("rereg_translation",
	      ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf, 1 << 16, 0) == 0 &&
		      mr->addr == buf && mr->length == 1 << 16 && mr->rkey == rkey,
	      "errno %d", errno);

	/* Extended SRQs: basic ones only. The inline ibv_create_srq_ex passes
	 * a plain PD + type request to ibv_create_srq; the CQ bit sends this
	 * one through the context's create_srq_ex. */
	struct ibv_srq_init_attr_ex sx = {.attr = {.max_wr = 16, .max_sge = 1},
					  .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
						       IBV_SRQ_INIT_ATTR_CQ,
					  .srq_type = IBV_SRQT_BASIC, .pd = pd, .cq = cq};
	struct ibv_srq *srq = ibv_create_srq_ex(ctx, &sx);
	CHECK("create_srq_ex_basic", srq && sx.attr.max_wr >= 16, "errno %d", errno);
	CHECK("destroy_srq_ex", srq && ibv_destroy_srq(srq) == 0, "");
	sx.srq_type = IBV_SRQT_XRC;
	errno = 0;
	CHECK("create_srq_ex_xrc", !ibv_create_srq_ex(ctx, &sx) && errno == EOPNOTSUPP,
	      "errno %d", errno);
	sx.srq_type = 7;
	errno = 0;
	CHECK("create_srq_ex_unknown_type", !ibv_create_srq_ex(ctx, &sx) && errno == EINVAL,
	      "errno %d", errno);
	sx.srq_type = IBV_SRQT_BASIC;
	sx.comp_mask = IBV_SRQ_INIT_ATTR_CQ;
	errno = 0;
	CHECK("create_srq_ex_without_pd", !ibv_create_srq_ex(ctx, &sx) && errno == EINVAL,
	      "errno %d", errno);

	/* QPs: a loop-back pair on one NIC. */
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *a = ibv_create_qp(pd, &ia);
	struct ibv_qp *b = ibv_create_qp(pd, &ia);
	CHECK("create_qps", a && b, "errno %d", errno);
	struct ibv_qp_init_attr bad = ia;
	bad.qp_type = 77;
	errno = 0;
	CHECK("create_qp_unknown_type", !ibv_create_qp(pd, &bad) && errno == EINVAL, "errno %d",
	      errno);

	/* Objects of another context. */
	struct ibv_context *ctx2 = open_first("second");
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx2);
	errno = 0;
	CHECK("create_qp_with_a_foreign_cq", !ibv_create_qp(pd2, &ia) && errno == EINVAL,
	      "errno %d", errno);
	ibv_dealloc_pd(pd2);
	ibv_close_device(ctx2);

	/* A transition missing a required attribute. */
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT};
	CHECK("modify_missing_attr", ibv_modify_qp(a, &qa, IBV_QP_STATE) == EINVAL, "");
	CHECK("to_rts", to_rts(a, b->qp_num, gid) == 0 && to_rts(b, a->qp_num, gid) == 0,
	      "errno %d", errno);

	/* A WR chain with a bad WR in the middle: the one before it runs,
	 * bad_wr names the bad one, the one after does not run. */
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	struct ibv_sge sges[8];
	for (int i = 0; i < 8; i++)
		sges[i] = sge;
	struct ibv_send_wr w3 = {.wr_id = 3, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
	w3.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
	w3.wr.rdma.rkey = mr->rkey;
	struct ibv_send_wr w2 = w3, w1 = w3, *bad_wr = NULL;
	w2.wr_id = 2;
	w2.sg_list = sges;
	w2.num_sge = 8;
	w2.next = &w3;
	w1.wr_id = 1;
	w1.next = &w2;
	CHECK("post_send_too_many_sges", ibv_post_send(a, &w1, &bad_wr) == EINVAL &&
						 bad_wr == &w2,
	      "bad_wr %p (w2 %p)", (void *)bad_wr, (void *)&w2);
	struct ibv_wc wc;
	int n = wait_wc(cq, &wc);
	CHECK("only_the_first_ran", n == 1 && wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS,
	      "n %d wr_id %llu status %d", n, (unsigned long long)wc.wr_id, wc.status);
	CHECK("nothing_after_it", ibv_poll_cq(cq, 1, &wc) == 0, "another completion");

	w1.next = NULL;
	w1.opcode = 99;
	bad_wr = NULL;
	CHECK("post_send_unknown_opcode", ibv_post_send(a, &w1, &bad_wr) == EINVAL &&
						  bad_wr == &w1,
	      "");
	w1.opcode = IBV_WR_RDMA_WRITE;
	w1.num_sge = -1;
	CHECK("post_send_negative_num_sge", ibv_post_send(a, &w1, &bad_wr) == EINVAL, "");
	w1.num_sge = 1;
	w1.sg_list = NULL;
	CHECK("post_send_null_sg_list", ibv_post_send(a, &w1, &bad_wr) == EINVAL, "");
	w1.sg_list = &sge;

	/* Inline data past the QP's room: ENOMEM (as mlx5), bad_wr names the
	 * WR, and nothing is read from its buffer first (it is NULL + 1). */
	struct ibv_qp_attr got;
	struct ibv_qp_init_attr got_init;
	ibv_query_qp(a, &got, IBV_QP_CAP, &got_init);
	struct ibv_sge far = {.addr = 1, .length = got.cap.max_inline_data + 1, .lkey = 0};
	struct ibv_send_wr wi = w1;
	wi.wr_id = 10;
	wi.sg_list = &far;
	wi.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	bad_wr = NULL;
	CHECK("post_send_inline_too_long", ibv_post_send(a, &wi, &bad_wr) == ENOMEM &&
						   bad_wr == &wi,
	      "max_inline_data %u", got.cap.max_inline_data);

	/* A receive chain with a bad SGE list in the middle: the WR before it
	 * is posted (a SEND lands in it), bad_wr names the bad one. */
	struct ibv_recv_wr r3 = {.wr_id = 33, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr r2 = r3, r1 = r3, *bad_rwr = NULL;
	r2.wr_id = 32;
	r2.sg_list = sges;
	r2.num_sge = 8;
	r2.next = &r3;
	r1.wr_id = 31;
	r1.next = &r2;
	CHECK("post_recv_too_many_sges", ibv_post_recv(b, &r1, &bad_rwr) == EINVAL &&
						 bad_rwr == &r2,
	      "bad_wr %p (r2 %p)", (void *)bad_rwr, (void *)&r2);
	r2.sg_list = NULL;
	r2.num_sge = 1;
	r1.next = &r2;
	r2.next = NULL;
	bad_rwr = NULL;
	struct ibv_recv_wr r0 = r3;
	r0.wr_id = 30;
	r0.next = &r2;
	/* r0 is posted too: two receives wait, r1 then r0. */
	CHECK("post_recv_null_sg_list", ibv_post_recv(b, &r0, &bad_rwr) == EINVAL &&
						bad_rwr == &r2,
	      "bad_wr %p (r2 %p)", (void *)bad_rwr, (void *)&r2);
	struct ibv_send_wr ws = {.wr_id = 34, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_wc two[2];
	int got_wc = 0;
	for (int k = 0; k < 2; k++) {
		ibv_post_send(a, &ws, &bad_wr);
		for (int seen = 0; seen < 2; seen++)
			got_wc += wait_wc(cq, &two[seen]) == 1 &&
				  two[seen].status == IBV_WC_SUCCESS &&
				  two[seen].wr_id == (two[seen].opcode == IBV_WC_RECV ?
								(k ? 30u : 31u) : 34u);
	}
	CHECK("post_recv_posted_those_before", got_wc == 4, "%d of 4 completions as expected",
	      got_wc);
	CHECK("post_recv_nothing_after", ibv_poll_cq(cq, 1, &wc) == 0, "another completion");

	/* A chain longer than the receive queue: ENOMEM at the first WR past
	 * its room (as mlx5), the ones before it posted. */
	ibv_query_qp(b, &got, IBV_QP_CAP, &got_init);
	int room = (int)got.cap.max_recv_wr;
	struct ibv_recv_wr *chain = calloc((size_t)room + 1, sizeof(*chain));
	for (int k = 0; chain && k <= room; k++) {
		chain[k] = r3;
		chain[k].wr_id = 100 + (uint64_t)k;
		chain[k].next = k < room ? &chain[k + 1] : NULL;
	}
	bad_rwr = NULL;
	CHECK("post_recv_past_the_queue", chain && ibv_post_recv(b, chain, &bad_rwr) == ENOMEM &&
						  bad_rwr == &chain[room],
	      "max_recv_wr %d bad_wr %p (expected %p)", room, (void *)bad_rwr,
	      chain ? (void *)&chain[room] : NULL);
	free(chain);

	/* The ibv_wr_* API: a misuse is kept and reported by ibv_wr_complete,
	 * which then posts nothing; a good batch's inline bytes arrive. */
	struct ibv_qp_init_attr_ex ix = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					 .cap = {.max_send_wr = 8, .max_recv_wr = 8,
						 .max_send_sge = 1, .max_recv_sge = 1,
						 .max_inline_data = 32},
					 .comp_mask = IBV_QP_INIT_ATTR_PD |
						      IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .pd = pd,
					 .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE |
							   IBV_QP_EX_WITH_RDMA_READ};
	struct ibv_qp *c = ibv_create_qp_ex(ctx, &ix);
	struct ibv_qp *d = ibv_create_qp(pd, &ia);
	struct ibv_qp_ex *cx = c ? ibv_qp_to_qp_ex(c) : NULL;
	CHECK("create_qp_ex", c && d && cx, "errno %d", errno);
	CHECK("to_rts_ex", to_rts(c, d->qp_num, gid) == 0 && to_rts(d, c->qp_num, gid) == 0,
	      "errno %d", errno);
	CHECK("wr_complete_unstarted", ibv_wr_complete(cx) == EINVAL, "");
	ibv_wr_start(cx);
	ibv_wr_set_sge(cx, mr->lkey, (uintptr_t)buf, 8);
	CHECK("wr_setter_before_an_opcode", ibv_wr_complete(cx) == EINVAL, "");
	ibv_wr_start(cx);
	cx->wr_id = 20;
	cx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(cx, mr->rkey, (uintptr_t)buf + 8192);
	ibv_wr_set_inline_data(cx, buf, 8);
	CHECK("wr_inline_on_a_read", ibv_wr_complete(cx) == EINVAL, "");
	ibv_wr_start(cx);
	cx->wr_id = 21;
	ibv_wr_rdma_write(cx, mr->rkey, (uintptr_t)buf + 8192);
	ibv_wr_set_inline_data(cx, NULL, 1000);
	CHECK("wr_inline_too_long", ibv_wr_complete(cx) == ENOMEM, "");
	CHECK("wr_failures_posted_nothing", ibv_poll_cq(cq, 1, &wc) == 0, "a completion");
	char msg[8] = "wr-api!";
	memset(buf + 8192, 0, 8);
	ibv_wr_start(cx);
	cx->wr_id = 22;
	cx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(cx, mr->rkey, (uintptr_t)buf + 8192);
	ibv_wr_set_inline_data(cx, msg, sizeof msg);
	memset(msg, 'x', sizeof msg); /* copied at the call: reusable at once */
	CHECK("wr_complete", ibv_wr_complete(cx) == 0, "");
	n = wait_wc(cq, &wc);
	CHECK("wr_inline_arrived", n == 1 && wc.wr_id == 22 && wc.status == IBV_WC_SUCCESS &&
					   memcmp(buf + 8192, "wr-api!", 8) == 0,
	      "n %d wr_id %llu status %d", n, (unsigned long long)wc.wr_id, wc.status);
	CHECK("destroy_qp_ex", ibv_destroy_qp(c) == 0 && ibv_destroy_qp(d) == 0, "");

	/* Destroying what is in use. */
	CHECK("destroy_cq_in_use", ibv_destroy_cq(cq) == EBUSY, "");
	CHECK("dealloc_pd_in_use", ibv_dealloc_pd(pd) == EBUSY, "");

	/* Memory the program unmaps while it is registered: the WR fails with
	 * a protection error; the process does not crash. */
	char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mm = ibv_reg_mr(pd, m, 8192, IBV_ACCESS_LOCAL_WRITE);
	CHECK("reg_mmapped", mm != NULL, "errno %d", errno);
	munmap(m, 8192);
	struct ibv_sge gs = {.addr = (uintptr_t)m, .length = 64, .lkey = mm->lkey};
	struct ibv_send_wr wg = w1;
	wg.wr_id = 9;
	wg.sg_list = &gs;
	CHECK("post_from_unmapped", ibv_post_send(a, &wg, &bad_wr) == 0, "errno");
	n = wait_wc(cq, &wc);
	CHECK("unmapped_is_a_protection_error",
	      n == 1 && wc.wr_id == 9 && wc.status == IBV_WC_LOC_PROT_ERR,
	      "n %d wr_id %llu status %d (%s)", n, (unsigned long long)wc.wr_id, wc.status,
	      ibv_wc_status_str(wc.status));
	ibv_dereg_mr(mm);

	/* Use after destroy through an exported function is refused, not
	 * followed. */
	CHECK("destroy_qp", ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "");
	CHECK("destroy_qp_twice", ibv_destroy_qp(a) == EINVAL, "");
	CHECK("dereg_mr", ibv_dereg_mr(mr) == 0, "");
	CHECK("dereg_mr_twice", ibv_dereg_mr(mr) == EINVAL, "");
	CHECK("destroy_cq", ibv_destroy_cq(cq) == 0, "");
	/* (A destroyed CQ cannot be polled safely: the inline ibv_poll_cq reads
	 * cq->context from the freed handle before any call reaches us.) */
	CHECK("dealloc_pd", ibv_dealloc_pd(pd) == 0, "");
	CHECK("close", ibv_close_device(ctx) == 0, "");
	CHECK("close_twice", ibv_close_device(ctx) == EINVAL, "");
	free(buf);
	printf("%d failed\n", failures);
	return failures != 0;
}
