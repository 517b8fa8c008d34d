/* Connects to the rdma_cm server at argv[1], port argv[2], then exits
 * without disconnecting or destroying anything, as a program that ends on
 * an error does: its peer must see DISCONNECTED, as with the kernel's
 * rdma_cm, which ends a process's connections when it exits. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <rdma/rdma_cma.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cm_exit SERVER PORT\n");
		return 2;
	}
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *res = NULL;
	if (rdma_getaddrinfo(argv[1], argv[2], &hints, &res)) {
		perror("rdma_getaddrinfo");
		return 1;
	}
	struct ibv_qp_init_attr ia = {.qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct rdma_cm_id *id = NULL;
	if (rdma_create_ep(&id, res, NULL, &ia)) {
		perror("rdma_create_ep");
		return 1;
	}
	if (rdma_connect(id, NULL)) {
		perror("rdma_connect");
		return 1;
	}
	printf("connected\n");
	fflush(stdout);
	exit(0);
}
