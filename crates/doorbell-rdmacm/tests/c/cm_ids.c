/* rdma_cm ids before a connection: binding (the wildcard, the NIC's own
 * address, an address no device has), ports, address and route resolution
 * with their events and what they fill in the id, a synchronous id, options
 * and migration between channels. Built against <rdma/rdma_cma.h>, linked
 * -lrdmacm, run on doorbell's libraries. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "check.h"

static struct sockaddr_in sin4(uint32_t host_order_ip, uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	a.sin_addr.s_addr = htonl(host_order_ip);
	return a;
}

static int next_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		      struct rdma_cm_id *id)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		return -1;
	int ok = ev->event == want && ev->id == id && ev->status == 0;
	rdma_ack_cm_event(ev);
	return ok ? 0 : -1;
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct ibv_context **devs = rdma_get_devices(NULL);
	union ibv_gid gid;
	CHECK("device", devs && devs[0] && ibv_query_gid(devs[0], 1, 0, &gid) == 0, "");
	uint32_t nic_ip;
	memcpy(&nic_ip, &gid.raw[12], 4);
	nic_ip = ntohl(nic_ip);

	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	int tag = 7;
	errno = 0;
	CHECK("bad_port_space", rdma_create_id(ch, &id, &tag, (enum rdma_port_space)0x999) == -1 &&
					errno == EINVAL,
	      "errno %d", errno);
	CHECK("create_id", rdma_create_id(ch, &id, &tag, RDMA_PS_TCP) == 0 && id &&
				   id->channel == ch && id->context == &tag && !id->verbs &&
				   id->ps == RDMA_PS_TCP && id->qp_type == IBV_QPT_RC,
	      "errno %d", errno);

	/* An address no device has. */
	struct sockaddr_in far = sin4(0x0a090909, 0);
	errno = 0;
	CHECK("bind_elsewhere_enodev",
	      rdma_bind_addr(id, (struct sockaddr *)&far) == -1 && errno == ENODEV, "errno %d",
	      errno);
	/* The NIC's own address binds its device; port 0 is an ephemeral one. */
	struct sockaddr_in own = sin4(nic_ip, 0);
	CHECK("bind_own", rdma_bind_addr(id, (struct sockaddr *)&own) == 0 && id->verbs == devs[0] &&
				  id->port_num == 1,
	      "errno %d verbs %p", errno, (void *)id->verbs);
	uint16_t port = ntohs(rdma_get_src_port(id));
	struct sockaddr_in *src = (struct sockaddr_in *)rdma_get_local_addr(id);
	CHECK("src_addr", src->sin_family == AF_INET && ntohl(src->sin_addr.s_addr) == nic_ip &&
				  ntohs(src->sin_port) == port && port >= 32768,
	      "family %d port %u", src->sin_family, port);
	int one = 1;
	errno = 0;
	CHECK("reuseaddr_after_bind_einval",
	      rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) ==
			      -1 &&
		      errno == EINVAL,
	      "errno %d", errno);
	uint8_t tos = 0x28;
	CHECK("tos", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0, "");
	errno = 0;
	CHECK("tos_bad_len",
	      rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &one, sizeof one) == -1 &&
		      errno == EINVAL,
	      "errno %d", errno);

	/* Resolving reports each step on the channel. */
	struct sockaddr_in peer = sin4(0x0a010203, 7471);
	CHECK("resolve_addr", rdma_resolve_addr(id, NULL, (struct sockaddr *)&peer, 2000) == 0, "errno %d",
	      errno);
	CHECK("addr_resolved", next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id) == 0, "");
	struct sockaddr_in *dst = (struct sockaddr_in *)rdma_get_peer_addr(id);
	CHECK("dst_addr", dst->sin_family == AF_INET && dst->sin_addr.s_addr == peer.sin_addr.s_addr &&
				  ntohs(rdma_get_dst_port(id)) == 7471,
	      "");
	CHECK("resolve_route", rdma_resolve_route(id, 2000) == 0, "errno %d", errno);
	CHECK("route_resolved", next_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, id) == 0, "");
	struct ibv_sa_path_rec *p = id->route.path_rec;
	CHECK("path", id->route.num_paths == 1 && p && p->dgid.raw[10] == 0xff &&
			      memcmp(&p->dgid.raw[12], &peer.sin_addr.s_addr, 4) == 0 &&
			      memcmp(p->sgid.raw, gid.raw, 16) == 0 && p->hop_limit == 64 &&
			      p->traffic_class == 0x28 && p->pkey == htons(0xffff) &&
			      p->mtu == IBV_MTU_4096,
	      "num_paths %d", id->route.num_paths);

	/* A synchronous id (no channel): the calls wait for their events. */
	struct rdma_cm_id *sync = NULL;
	CHECK("sync_id", rdma_create_id(NULL, &sync, NULL, RDMA_PS_UDP) == 0 && sync->channel &&
				 sync->qp_type == IBV_QPT_UD,
	      "");
	CHECK("sync_resolve", rdma_resolve_addr(sync, NULL, (struct sockaddr *)&peer, 100) == 0 &&
				      rdma_resolve_route(sync, 100) == 0 && sync->verbs == devs[0] &&
				      sync->route.num_paths == 1,
	      "errno %d", errno);

	/* Migration takes the events not yet read along. */
	struct rdma_cm_id *m = NULL;
	struct rdma_event_channel *ch2 = rdma_create_event_channel();
	rdma_create_id(ch, &m, NULL, RDMA_PS_TCP);
	rdma_resolve_addr(m, NULL, (struct sockaddr *)&peer, 100);
	CHECK("migrate", rdma_migrate_id(m, ch2) == 0 && m->channel == ch2, "");
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	struct rdma_cm_event *ev = NULL;
	errno = 0;
	CHECK("old_channel_empty", rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "errno %d",
	      errno);
	CHECK("event_moved", next_event(ch2, RDMA_CM_EVENT_ADDR_RESOLVED, m) == 0, "");

	CHECK("destroy", rdma_destroy_id(m) == 0 && rdma_destroy_id(sync) == 0 &&
				 rdma_destroy_id(id) == 0,
	      "");
	/* The port is free again. */
	struct rdma_cm_id *again = NULL;
	struct sockaddr_in same = sin4(nic_ip, port);
	CHECK("port_freed", rdma_create_id(ch, &again, NULL, RDMA_PS_TCP) == 0 &&
				    rdma_bind_addr(again, (struct sockaddr *)&same) == 0,
	      "errno %d", errno);
	rdma_destroy_id(again);
	rdma_destroy_event_channel(ch2);
	rdma_destroy_event_channel(ch);
	rdma_free_devices(devs);
	printf("%d failed\n", failures);
	return failures != 0;
}
