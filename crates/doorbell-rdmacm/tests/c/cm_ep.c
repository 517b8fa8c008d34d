/* rdma_getaddrinfo and endpoints: a passive lookup without a node is the
 * wildcard, an active one names the destination; a lookup failure returns
 * getaddrinfo's code; rdma_create_ep makes a synchronous id, bound
 * (passive) or resolved with its route and QP (active); rdma_destroy_ep. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "check.h"

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP};
	struct rdma_addrinfo *res = NULL;
	CHECK("passive_lookup", rdma_getaddrinfo(NULL, "7471", &hints, &res) == 0 && res &&
					(res->ai_flags & RAI_PASSIVE) && res->ai_family == AF_INET &&
					res->ai_qp_type == IBV_QPT_RC &&
					res->ai_port_space == RDMA_PS_TCP && res->ai_src_addr &&
					!res->ai_dst_addr && !res->ai_next,
	      "");
	struct sockaddr_in *s = (struct sockaddr_in *)res->ai_src_addr;
	CHECK("wildcard", s->sin_addr.s_addr == htonl(INADDR_ANY) && ntohs(s->sin_port) == 7471 &&
				  res->ai_src_len == sizeof(struct sockaddr_in),
	      "");
	struct rdma_cm_id *listen = NULL;
	CHECK("passive_ep", rdma_create_ep(&listen, res, NULL, NULL) == 0 && listen &&
				    ntohs(rdma_get_src_port(listen)) == 7471 && !listen->verbs,
	      "errno %d", errno);
	rdma_freeaddrinfo(res);

	struct rdma_addrinfo active = {.ai_port_space = RDMA_PS_TCP};
	res = NULL;
	CHECK("active_lookup", rdma_getaddrinfo("10.1.2.3", "7471", &active, &res) == 0 &&
				       res->ai_dst_addr && !(res->ai_flags & RAI_PASSIVE) &&
				       res->ai_dst_canonname &&
				       strcmp(res->ai_dst_canonname, "10.1.2.3") == 0,
	      "");
	struct ibv_qp_init_attr ia = {.qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct rdma_cm_id *id = NULL;
	CHECK("active_ep", rdma_create_ep(&id, res, NULL, &ia) == 0 && id->verbs && id->qp &&
				   id->route.num_paths == 1 &&
				   ntohs(rdma_get_dst_port(id)) == 7471,
	      "errno %d", errno);
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr qia;
	CHECK("ep_qp_init", id && id->qp && ibv_query_qp(id->qp, &a, IBV_QP_STATE, &qia) == 0 &&
				    a.qp_state == IBV_QPS_INIT,
	      "");
	rdma_freeaddrinfo(res);

	struct rdma_addrinfo numeric = {.ai_flags = RAI_NUMERICHOST};
	res = NULL;
	CHECK("numeric_noname", rdma_getaddrinfo("no.such.host", "1", &numeric, &res) == EAI_NONAME,
	      "");
	errno = 0;
	CHECK("nothing_einval", rdma_getaddrinfo(NULL, NULL, NULL, &res) == -1 && errno == EINVAL, "");

	rdma_destroy_ep(id);
	rdma_destroy_ep(listen);
	/* The port is free again. */
	hints.ai_flags = RAI_PASSIVE;
	res = NULL;
	rdma_getaddrinfo(NULL, "7471", &hints, &res);
	CHECK("port_freed", rdma_create_ep(&listen, res, NULL, NULL) == 0, "errno %d", errno);
	rdma_destroy_ep(listen);
	rdma_freeaddrinfo(res);
	printf("%d failed\n", failures);
	return failures != 0;
}
