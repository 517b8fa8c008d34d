/* What doorbell's rdma_cm offers before a connection: an event channel is a
 * real descriptor (poll sees nothing, O_NONBLOCK answers EAGAIN),
 * rdma_get_devices gives the doorbell device opened, and rdma_event_str
 * names every event. Built against <rdma/rdma_cma.h>, linked -lrdmacm, run
 * on doorbell's libraries. Prints "ok <name>" or "FAIL <name>: ..." lines. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "check.h"

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK("channel", ch && ch->fd >= 0 && fcntl(ch->fd, F_GETFD) >= 0, "errno %d", errno);
	struct pollfd p = {.fd = ch ? ch->fd : -1, .events = POLLIN};
	CHECK("nothing_to_read", poll(&p, 1, 0) == 0, "revents %#x", p.revents);
	if (ch)
		fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	struct rdma_cm_event *ev = NULL;
	errno = 0;
	CHECK("nonblocking_eagain", ch && rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN,
	      "errno %d", errno);
	errno = 0;
	CHECK("ack_unknown_event", rdma_ack_cm_event((struct rdma_cm_event *)&p) == -1 &&
					   errno == EINVAL,
	      "errno %d", errno);

	int n = -1;
	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK("devices", devs && n == 1 && devs[0] && !devs[1], "n %d", n);
	CHECK("device_name", devs && devs[0] && strcmp(ibv_get_device_name(devs[0]->device),
						       "doorbell0") == 0,
	      "%s", devs && devs[0] ? ibv_get_device_name(devs[0]->device) : "-");
	struct ibv_device_attr attr;
	CHECK("device_usable", devs && devs[0] && ibv_query_device(devs[0], &attr) == 0, "");
	struct ibv_context **again = rdma_get_devices(NULL);
	CHECK("same_contexts", again && devs && again[0] == devs[0], "%p %p",
	      again ? (void *)again[0] : NULL, devs ? (void *)devs[0] : NULL);
	rdma_free_devices(again);
	rdma_free_devices(devs);

	CHECK("event_str", strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED),
				  "RDMA_CM_EVENT_ESTABLISHED") == 0 &&
				   strcmp(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT),
					  "RDMA_CM_EVENT_TIMEWAIT_EXIT") == 0 &&
				   strcmp(rdma_event_str(RDMA_CM_EVENT_ADDR_RESOLVED),
					  "RDMA_CM_EVENT_ADDR_RESOLVED") == 0 &&
				   strcmp(rdma_event_str((enum rdma_cm_event_type)99),
					  "UNKNOWN EVENT") == 0,
	      "");
	rdma_destroy_event_channel(ch);
	printf("%d failed\n", failures);
	return failures != 0;
}
