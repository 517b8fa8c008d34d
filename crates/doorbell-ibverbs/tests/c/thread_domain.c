/* Thread domains and parent domains through the inline ibv_alloc_td,
 * ibv_dealloc_td and ibv_alloc_parent_domain: two RC QPs of one process,
 * each in a parent domain with a thread domain of its own, connected to
 * each other on the process's NIC, carry WRITEs and a SEND; one QP's
 * buffer comes from the application's allocator; the busy and invalid
 * paths answer what libmlx5 answers. Prints "ok <name>" per check
 * and "FAIL <name>: ..."; exits 0 only if every check passed. */
#define _GNU_SOURCE
#include "check.h"

#define LEN 8192

/* MLX5DV_RES_TYPE_QP: what libmlx5 names a QP buffer to the allocator. */
#define RES_TYPE_QP ((uint64_t)1 << 32 | 1)

/* What the application's allocator saw: the calls and their arguments. */
struct seen {
	int allocs, frees, defaults;
	struct ibv_pd *pd;
	size_t size, alignment;
	uint64_t type;
	void *ptr, *freed;
};

static void *my_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
		      uint64_t resource_type)
{
	struct seen *s = pd_context;
	s->allocs++;
	s->pd = pd, s->size = size, s->alignment = alignment, s->type = resource_type;
	if (posix_memalign(&s->ptr, alignment, size))
		return NULL;
	memset(s->ptr, 0xa5, size); /* the library must clear it */
	return s->ptr;
}

static void my_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	struct seen *s = pd_context;
	(void)pd, (void)resource_type;
	s->frees++;
	s->freed = ptr;
	free(ptr);
}

static void *default_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
			   uint64_t resource_type)
{
	struct seen *s = pd_context;
	(void)pd, (void)size, (void)alignment, (void)resource_type;
	s->defaults++;
	return IBV_ALLOCATOR_USE_DEFAULT;
}

static int post_write(struct ibv_qp *qp, struct ibv_mr *mr, char *from, uint32_t len,
		      char *to, uint64_t id, unsigned int flags)
{
	struct ibv_sge s = {.addr = (uintptr_t)from, .length = len, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED | flags,
				.wr.rdma = {.remote_addr = (uintptr_t)to, .rkey = mr->rkey}},
			   *bad;
	return ibv_post_send(qp, &w, &bad);
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct ibv_context *ctx = open_first("first");
	struct ibv_context *other = open_first("second");
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 0, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_pd *other_pd = ibv_alloc_pd(other);

	/* Thread domains. */
	struct ibv_td_init_attr tda = {.comp_mask = 1};
	errno = 0;
	CHECK("alloc_td with an unknown comp_mask is EINVAL", !ibv_alloc_td(ctx, &tda) && errno == EINVAL,
	      "errno %d", errno);
	tda.comp_mask = 0;
	struct ibv_td *td1 = ibv_alloc_td(ctx, &tda);
	struct ibv_td *td2 = ibv_alloc_td(ctx, &tda);
	struct ibv_td *other_td = ibv_alloc_td(other, &tda);
	CHECK("alloc_td", td1 && td2 && other_td && td1 != td2 && td1->context == ctx,
	      "%s", strerror(errno));

	/* Parent domains: what is refused. */
	struct ibv_parent_domain_init_attr pda = {.pd = pd, .td = td1, .comp_mask = 1 << 2};
	errno = 0;
	CHECK("an unknown comp_mask bit is EINVAL", !ibv_alloc_parent_domain(ctx, &pda) && errno == EINVAL,
	      "errno %d", errno);
	pda.comp_mask = 0;
	pda.pd = NULL;
	errno = 0;
	CHECK("no PD is EINVAL", !ibv_alloc_parent_domain(ctx, &pda) && errno == EINVAL, "errno %d",
	      errno);
	pda.pd = other_pd;
	errno = 0;
	CHECK("a PD of another context is EINVAL",
	      !ibv_alloc_parent_domain(ctx, &pda) && errno == EINVAL, "errno %d", errno);
	pda.pd = pd;
	pda.td = other_td;
	errno = 0;
	CHECK("a TD of another context is EINVAL",
	      !ibv_alloc_parent_domain(ctx, &pda) && errno == EINVAL, "errno %d", errno);
	pda.td = td1;
	pda.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
	pda.alloc = my_alloc;
	errno = 0;
	CHECK("an allocator without a free is EINVAL",
	      !ibv_alloc_parent_domain(ctx, &pda) && errno == EINVAL, "errno %d", errno);

	/* Two parent domains, each with its own TD; A's QP buffers come from
	 * the application's allocator. */
	struct seen seen = {0};
	pda.free = my_free;
	pda.pd_context = &seen;
	struct ibv_pd *pa = ibv_alloc_parent_domain(ctx, &pda);
	struct ibv_parent_domain_init_attr pdb = {.pd = pd, .td = td2};
	struct ibv_pd *pb = ibv_alloc_parent_domain(ctx, &pdb);
	CHECK("alloc_parent_domain", pa && pb && pa->context == ctx && pa->handle == pd->handle,
	      "%s", strerror(errno));
	CHECK("a TD in a parent domain is EBUSY", ibv_dealloc_td(td1) == EBUSY, "busy");
	CHECK("a PD under a parent domain is EBUSY", ibv_dealloc_pd(pd) == EBUSY, "busy");

	/* Everything a PD makes, a parent domain makes. */
	char *buf = calloc(1, LEN);
	struct ibv_mr *mr = ibv_reg_mr(pa, buf, LEN,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	CHECK("reg_mr in a parent domain", mr && mr->pd == pa, "%s", strerror(errno));
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pa, &sa);
	CHECK("create_srq in a parent domain", srq && ibv_destroy_srq(srq) == 0, "%s",
	      strerror(errno));
	struct ibv_ah_attr aha = {.is_global = 1, .port_num = 1,
				  .grh = {.dgid = gid, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(pa, &aha);
	CHECK("create_ah in a parent domain", ah && ibv_destroy_ah(ah) == 0, "%s", strerror(errno));
	struct ibv_qp_init_attr qa_attr = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					   .cap = {.max_send_wr = 8, .max_recv_wr = 8,
						   .max_send_sge = 1, .max_recv_sge = 1,
						   .max_inline_data = 64}};
	struct ibv_qp *qa = ibv_create_qp(pa, &qa_attr);
	struct ibv_qp_init_attr_ex qb_attr = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					      .cap = qa_attr.cap, .comp_mask = IBV_QP_INIT_ATTR_PD,
					      .pd = pb};
	struct ibv_qp *qb = ibv_create_qp_ex(ctx, &qb_attr);
	CHECK("create_qp and create_qp_ex in parent domains", qa && qb && qa->pd == pa,
	      "%s", strerror(errno));
	CHECK("the allocator gave A's QP buffer",
	      seen.allocs == 1 && seen.pd == pa && seen.alignment == 4096 &&
		      seen.size % 4096 == 0 && seen.type == RES_TYPE_QP && seen.frees == 0,
	      "allocs %d pd %p alignment %zu size %zu type %#llx", seen.allocs, (void *)seen.pd,
	      seen.alignment, seen.size, (unsigned long long)seen.type);
	int cleared = seen.ptr != NULL;
	for (size_t i = 0; cleared && i < seen.size; i++)
		cleared = ((unsigned char *)seen.ptr)[i] == 0;
	CHECK("the library cleared the buffer it was given", cleared, "0xa5 left");
	if (!qa || !qb || !mr) {
		printf("%d failed\n", failures);
		return 1;
	}
	unsigned int access = IBV_ACCESS_REMOTE_WRITE;
	CHECK("connect", !rc_to_rts(qa, qb->qp_num, gid, access) &&
			 !rc_to_rts(qb, qa->qp_num, gid, access), "%s", strerror(errno));

	/* WRITEs: a small inline one (BlueFlame) and 2 KiB by pointer. */
	struct ibv_wc wc;
	memcpy(buf, "parent-domain", 13);
	for (int i = 0; i < 2048; i++)
		buf[100 + i] = (char)(i * 7);
	int rc = post_write(qa, mr, buf, 13, buf + 4096, 1, IBV_SEND_INLINE);
	CHECK("inline WRITE", !rc && wait_wc(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
				      wc.wr_id == 1 && !memcmp(buf + 4096, "parent-domain", 13),
	      "rc %d status %d", rc, wc.status);
	rc = post_write(qa, mr, buf + 100, 2048, buf + 5000, 2, 0);
	CHECK("2 KiB WRITE", !rc && wait_wc(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
				     !memcmp(buf + 5000, buf + 100, 2048),
	      "rc %d status %d", rc, wc.status);
	/* A SEND from B's TD QP into A. */
	struct ibv_sge rs = {.addr = (uintptr_t)(buf + 7200), .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 30, .sg_list = &rs, .num_sge = 1}, *rbad;
	struct ibv_sge ss = {.addr = (uintptr_t)(buf + 100), .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 3, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	rc = ibv_post_recv(qa, &rw, &rbad) || ibv_post_send(qb, &sw, &sbad);
	int got_send = 0, got_recv = 0;
	for (int i = 0; i < 2 && wait_wc(cq, &wc) == 1; i++) {
		got_send |= wc.wr_id == 3 && wc.status == IBV_WC_SUCCESS;
		got_recv |= wc.wr_id == 30 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 64;
	}
	CHECK("SEND between TD QPs", !rc && got_send && got_recv &&
					     !memcmp(buf + 7200, buf + 100, 64),
	      "rc %d send %d recv %d", rc, got_send, got_recv);

	/* An allocator that defers to the library, and an extended CQ in a
	 * parent domain. */
	struct seen deferred = {0};
	struct ibv_parent_domain_init_attr pdd = {
		.pd = pd,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			     IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
		.alloc = default_alloc, .free = my_free, .pd_context = &deferred};
	struct ibv_pd *pd_default = ibv_alloc_parent_domain(ctx, &pdd);
	qa_attr.srq = NULL;
	struct ibv_qp *qd = pd_default ? ibv_create_qp(pd_default, &qa_attr) : NULL;
	CHECK("IBV_ALLOCATOR_USE_DEFAULT uses the library's memory",
	      qd && deferred.defaults == 1 && !ibv_destroy_qp(qd) && deferred.frees == 0,
	      "%s defaults %d frees %d", strerror(errno), deferred.defaults, deferred.frees);
	struct ibv_cq_init_attr_ex cqa = {.cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS,
					  .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
					  .parent_domain = pd};
	errno = 0;
	CHECK("an extended CQ in a PD that is no parent domain is EINVAL",
	      !ibv_create_cq_ex(ctx, &cqa) && errno == EINVAL, "errno %d", errno);
	cqa.parent_domain = pd_default;
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cqa);
	CHECK("an extended CQ in a parent domain holds it",
	      cqx && ibv_dealloc_pd(pd_default) == EBUSY, "%s", strerror(errno));
	CHECK("and lets it go", cqx && !ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) &&
				!ibv_dealloc_pd(pd_default), "teardown");

	/* Tearing down: each holder in turn. */
	CHECK("a parent domain with a QP is EBUSY", ibv_dealloc_pd(pa) == EBUSY, "busy");
	CHECK("destroy_qp", ibv_destroy_qp(qa) == 0, "destroy");
	CHECK("destroy_qp gave the buffer back", seen.frees == 1 && seen.freed == seen.ptr,
	      "frees %d", seen.frees);
	CHECK("a parent domain with an MR is EBUSY", ibv_dealloc_pd(pa) == EBUSY, "busy");
	CHECK("dereg_mr", ibv_dereg_mr(mr) == 0, "dereg");
	CHECK("dealloc_pd of a parent domain", ibv_dealloc_pd(pa) == 0, "dealloc");
	CHECK("its TD is free", ibv_dealloc_td(td1) == 0, "dealloc_td");
	/* (A second ibv_dealloc_td would be the caller's use after free: the
	 * inline function reads td->context first.) */
	CHECK("teardown", !ibv_destroy_qp(qb) && !ibv_dealloc_pd(pb) && !ibv_dealloc_td(td2) &&
				  !ibv_dealloc_pd(pd) && !ibv_dealloc_td(other_td) &&
				  !ibv_dealloc_pd(other_pd) && !ibv_destroy_cq(cq),
	      "%s", strerror(errno));
	ibv_close_device(other);
	ibv_close_device(ctx);
	free(buf);
	printf("%d failed\n", failures);
	return failures != 0;
}
