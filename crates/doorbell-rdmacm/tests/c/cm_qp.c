/* QPs on rdma_cm ids, as librdmacm makes them: on the id's device, the
 * default PD and CQs of the id's own when none are given, a connected QP
 * left in INIT for the CM, a datagram QP in RTS with rdma_cm's UDP Q_Key;
 * rdma_init_qp_attr's answers; rdma_destroy_qp. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "check.h"

static int state_of(struct ibv_qp *qp, uint32_t *qkey)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_QKEY, &ia))
		return -1;
	if (qkey)
		*qkey = a.qkey;
	return a.qp_state;
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct ibv_qp_init_attr ia = {.qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	errno = 0;
	CHECK("unbound_einval", rdma_create_qp(id, NULL, &ia) == -1 && errno == EINVAL, "errno %d",
	      errno);

	struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(7471)};
	peer.sin_addr.s_addr = htonl(0x0a010203);
	struct rdma_cm_event *ev;
	CHECK("resolved", rdma_resolve_addr(id, NULL, (struct sockaddr *)&peer, 100) == 0 &&
				  rdma_get_cm_event(ch, &ev) == 0 && rdma_ack_cm_event(ev) == 0,
	      "");
	CHECK("create_qp", rdma_create_qp(id, NULL, &ia) == 0 && id->qp && id->pd &&
				   id->qp->context == id->verbs,
	      "errno %d", errno);
	CHECK("own_cqs", id->send_cq && id->recv_cq && id->send_cq_channel &&
				 id->recv_cq_channel && ia.send_cq == id->send_cq &&
				 ia.recv_cq == id->recv_cq && ia.cap.max_send_wr >= 8,
	      "");
	CHECK("rc_in_init", state_of(id->qp, NULL) == IBV_QPS_INIT, "state %d",
	      state_of(id->qp, NULL));
	errno = 0;
	CHECK("second_qp_einval", rdma_create_qp(id, NULL, &ia) == -1 && errno == EINVAL, "");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT};
	int mask = 0;
	CHECK("init_attr", rdma_init_qp_attr(id, &a, &mask) == 0 &&
				   mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS) &&
				   a.port_num == 1 && a.qp_access_flags == 0,
	      "mask %#x", mask);
	a.qp_state = IBV_QPS_RTR;
	errno = 0;
	CHECK("rc_rtr_needs_a_connection", rdma_init_qp_attr(id, &a, &mask) == -1 && errno == EINVAL,
	      "errno %d", errno);
	rdma_destroy_qp(id);
	CHECK("destroyed", id->qp == NULL && id->send_cq == NULL && id->recv_cq == NULL, "");

	/* A datagram id's QP is ready to send, with rdma_cm's Q_Key. */
	struct rdma_cm_id *ud = NULL;
	rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP);
	rdma_resolve_addr(ud, NULL, (struct sockaddr *)&peer, 100);
	rdma_get_cm_event(ch, &ev);
	rdma_ack_cm_event(ev);
	struct ibv_pd *pd = ibv_alloc_pd(ud->verbs);
	struct ibv_cq *cq = ibv_create_cq(ud->verbs, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr ua = {.qp_type = IBV_QPT_UD, .send_cq = cq, .recv_cq = cq,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	uint32_t qkey = 0;
	CHECK("ud_qp", rdma_create_qp(ud, pd, &ua) == 0 && ud->pd == pd && ud->send_cq == NULL &&
			       state_of(ud->qp, &qkey) == IBV_QPS_RTS && qkey == 0x01234567,
	      "errno %d qkey %#x", errno, qkey);
	a.qp_state = IBV_QPS_RTS;
	CHECK("ud_rts_attr", rdma_init_qp_attr(ud, &a, &mask) == 0 &&
				     mask == (IBV_QP_STATE | IBV_QP_SQ_PSN),
	      "mask %#x", mask);
	rdma_destroy_qp(ud);
	CHECK("user_cq_kept", ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "");
	rdma_destroy_id(ud);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	printf("%d failed\n", failures);
	return failures != 0;
}
