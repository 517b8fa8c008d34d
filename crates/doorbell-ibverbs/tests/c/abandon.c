/* A process that leaves without destroying anything. It opens the device,
 * checks that the caps it reports are ones the device holds to, makes a
 * PD, an MR, a CQ and an RC QP towards a peer in the test process
 * (PEER_ADDR, PEER_QPN, PEER_VA, PEER_RKEY in the environment), prints
 * "qp <qpn> <va> <rkey>", and waits for "go" on stdin: by then the peer
 * has connected and WRITTEN "from the peer" into its MR. It WRITEs
 * "from the C side" into the peer's MR, and then, with ABANDON=exit,
 * calls _exit(0); with ABANDON=return, returns from main; neither
 * destroys a thing. With ABANDON=reopen it only opens the device again at
 * the same address and makes one of each object, as a new process does
 * right after the old one died. Prints "ok <name>" or "FAIL <name>: ...",
 * then "<n> failed". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static const char FROM_PEER[] = "from the peer";
static const char FROM_C[] = "from the C side";

static unsigned long long env_u64(const char *name)
{
	const char *v = getenv(name);
	return v ? strtoull(v, NULL, 0) : 0;
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	const char *mode = getenv("ABANDON");
	if (!mode)
		mode = "exit";
	struct ibv_context *ctx = open_first("doorbell0");
	struct ibv_device_attr attr;
	CHECK("query_device", ibv_query_device(ctx, &attr) == 0, "%s", strerror(errno));
	CHECK("caps_are_nonzero",
	      attr.max_qp > 0 && attr.max_cq > 0 && attr.max_mr > 0 && attr.max_pd > 0 &&
		      attr.max_srq > 0 && attr.max_srq_wr > 0 && attr.max_srq_sge > 0 &&
		      attr.max_qp_wr > 0 && attr.max_cqe > 0,
	      "max_qp %d max_cq %d max_mr %d max_pd %d max_srq %d/%d/%d max_qp_wr %d max_cqe %d",
	      attr.max_qp, attr.max_cq, attr.max_mr, attr.max_pd, attr.max_srq, attr.max_srq_wr,
	      attr.max_srq_sge, attr.max_qp_wr, attr.max_cqe);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK("alloc_pd", pd != NULL, "%s", strerror(errno));
	/* The CQ and QP sizes the caps announce are the limits: one past is
	 * EINVAL, as the kernel answers. */
	struct ibv_cq *big = ibv_create_cq(ctx, attr.max_cqe + 1, NULL, NULL, 0);
	CHECK("cq_past_max_cqe", big == NULL && errno == EINVAL, "%p %s", (void *)big,
	      strerror(errno));
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK("create_cq", cq != NULL, "%s", strerror(errno));
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = attr.max_qp_wr + 1, .max_recv_wr = 1,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *deep = ibv_create_qp(pd, &ia);
	CHECK("qp_past_max_qp_wr", deep == NULL && errno == EINVAL, "%p %s", (void *)deep,
	      strerror(errno));
	ia.cap.max_send_wr = 8;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK("create_qp", qp != NULL, "%s", strerror(errno));
	void *buf = NULL;
	CHECK("buffer", posix_memalign(&buf, 4096, 4096) == 0, "no memory");
	memset(buf, 0, 4096);
	unsigned int access =
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, access);
	CHECK("reg_mr", mr != NULL, "%s", strerror(errno));
	if (!pd || !cq || !qp || !mr) {
		printf("%d failed\n", failures);
		return 1;
	}
	if (strcmp(mode, "reopen") == 0) {
		printf("%d failed\n", failures);
		return failures != 0;
	}

	union ibv_gid gid;
	memset(&gid, 0, sizeof gid);
	gid.raw[10] = 0xff;
	gid.raw[11] = 0xff;
	const char *peer = getenv("PEER_ADDR");
	CHECK("peer_addr", peer && inet_pton(AF_INET, peer, &gid.raw[12]) == 1, "%s",
	      peer ? peer : "(unset)");
	CHECK("to_rts", rc_to_rts(qp, (uint32_t)env_u64("PEER_QPN"), gid, access) == 0, "%s",
	      strerror(errno));
	printf("qp %u %llu %u\n", qp->qp_num, (unsigned long long)(uintptr_t)buf, mr->rkey);

	char line[64] = {0};
	CHECK("go", fgets(line, sizeof line, stdin) && strncmp(line, "go", 2) == 0, "%s", line);
	CHECK("peer_wrote", memcmp(buf, FROM_PEER, sizeof FROM_PEER) == 0, "%.16s",
	      (const char *)buf);
	memcpy((char *)buf + 1024, FROM_C, sizeof FROM_C);
	struct ibv_sge sge = {.addr = (uintptr_t)buf + 1024, .length = sizeof FROM_C,
			      .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
	wr.wr.rdma.remote_addr = env_u64("PEER_VA");
	wr.wr.rdma.rkey = (uint32_t)env_u64("PEER_RKEY");
	struct ibv_send_wr *bad = NULL;
	CHECK("post_send", ibv_post_send(qp, &wr, &bad) == 0, "%s", strerror(errno));
	struct ibv_wc wc;
	CHECK("write_done", wait_wc(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "status %d",
	      wc.status);
	/* A WRITE posted and never waited for: gone with the process. */
	ibv_post_send(qp, &wr, &bad);
	printf("%d failed\n", failures);
	if (strcmp(mode, "exit") == 0)
		_exit(failures != 0);
	return failures != 0;
}
