/* The soak between two processes: mixed RC operations on several QPs,
 * every byte and every atomic checked, completions in posting order.
 *
 *   soak -p PORT [-q QPS] [-n OPS] [-t SECONDS] [-S SEED] [SERVER]
 *
 * Without SERVER it is the server: it listens on TCP PORT, takes the
 * client's QP numbers and gives its own, keeps receives posted and checks
 * every SEND it gets. With SERVER (an IPv4 address) it is the client: it
 * runs OPS operations (or as many as fit in SECONDS) from a seeded
 * generator, at most DEPTH outstanding per QP:
 *   - RDMA WRITE of a pattern into a slot of the server's memory, then a
 *     READ of that slot into another buffer, which must hold the pattern;
 *   - RDMA READ of a stretch of the server's source area (a known pattern);
 *   - SEND of a pattern headed by its operation number;
 *   - fetch-and-add of 1 on the QP's counter: the old value is the number
 *     of adds before it on that QP;
 *   - compare-and-swap of the QP's chain word from n to n + 1.
 * At the end the client tells the server how many SENDs, adds and swaps
 * each QP made; the server checks its counters and words and answers.
 * Each side prints "ok <check>" or "FAIL <check>: ..." lines and
 * "<n> failed" last, and exits 0 only if nothing failed. */
#include "check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_QPS 64
#define DEPTH 16
#define RECVS 64
#define MAX_SIZE 16384
/* Per QP, on the server: write slots, the READ source, receive buffers,
 * the atomic words. On the client: send/write buffers, READ buffers,
 * atomic results. */
#define SLOTS_AT 0
/* Twice as many write slots as WRs in flight: a slot is written again only
 * once the READ that checks its last WRITE has completed, so a READ that
 * the responder executes again (its response lost) cannot see a later
 * WRITE, which the specification allows it to return. */
#define WRITE_SLOTS (2 * DEPTH)
#define SOURCE_AT (SLOTS_AT + WRITE_SLOTS * MAX_SIZE)
#define RECV_AT (SOURCE_AT + MAX_SIZE)
#define ATOMIC_AT (RECV_AT + RECVS * MAX_SIZE)
#define REGION (ATOMIC_AT + 64)
#define C_OUT_AT 0
#define C_IN_AT (C_OUT_AT + DEPTH * MAX_SIZE)
#define C_ATOMIC_AT (C_IN_AT + DEPTH * MAX_SIZE)

enum kind { WRITE, READBACK, READ, SEND, FAA, CAS };

struct peer {
	uint8_t gid[16];
	uint64_t addr;
	uint32_t rkey;
	uint32_t qps;
	uint32_t qpn[MAX_QPS];
};

struct counts {
	uint64_t sends[MAX_QPS], faas[MAX_QPS], cass[MAX_QPS];
};

/* What an outstanding WR was for, by QP and slot. */
struct pending {
	enum kind kind;
	uint64_t op;
	uint32_t len;
	uint32_t offset; /* into the server's source (READ) */
	uint64_t expect; /* atomic: the old value */
};

static uint8_t pattern(uint64_t op, uint64_t i)
{
	return (uint8_t)(op * 131 + i * 7 + 13);
}

static uint8_t source_byte(uint64_t i)
{
	return (uint8_t)(i * 29 + 5);
}

static uint64_t rng_state;
static uint64_t next_random(void)
{
	/* splitmix64 */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void io_all(int fd, void *buf, size_t len, int out)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
		if (n <= 0) {
			printf("FAIL tcp %s: %s\n", out ? "write" : "read",
			       n == 0 ? "closed" : strerror(errno));
			exit(2);
		}
		p += n;
		len -= (size_t)n;
	}
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* 16 READs and atomics in flight, a 67 ms timeout (perftest's), a 10 us
 * RNR wait. The timeout must outlast the longest the responder can take to
 * answer: four QPs' full windows are about a thousand frames, over 30 ms
 * of work for a debug build on a loaded machine. A shorter timeout fires
 * with no frame lost, its go-back-N adds a window of duplicates to the
 * responder's queue, and the next one fires sooner still. Lost tails are
 * still resent within milliseconds: the library's adaptive retransmission
 * does not wait for the timeout. */
static int to_rts(struct ibv_qp *qp, uint32_t dest, const uint8_t *gid)
{
	union ibv_gid g;
	memcpy(g.raw, gid, sizeof g.raw);
	struct rc_opts o = {.rd_atomic = 16, .timeout = 14, .min_rnr_timer = 1};
	return rc_to_rts_with(qp, dest, g, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
			      o);
}

static int tcp_connect(const char *host, int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, host, &sa.sin_addr);
	for (int tries = 0; tries < 100; tries++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
			return fd;
		close(fd);
		usleep(100000);
	}
	printf("FAIL connect to %s:%d: %s\n", host, port, strerror(errno));
	exit(2);
}

static int tcp_accept(int port)
{
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_ANY)};
	if (bind(l, (struct sockaddr *)&sa, sizeof sa) || listen(l, 1)) {
		printf("FAIL listen on %d: %s\n", port, strerror(errno));
		exit(2);
	}
	int fd = accept(l, NULL, NULL);
	close(l);
	return fd;
}

int main(int argc, char **argv)
{
	int port = 18600, qps = 4, opt;
	uint64_t ops = 10000, seed = 1;
	double secs = 0;
	while ((opt = getopt(argc, argv, "p:q:n:t:S:")) != -1) {
		switch (opt) {
		case 'p': port = atoi(optarg); break;
		case 'q': qps = atoi(optarg); break;
		case 'n': ops = strtoull(optarg, NULL, 0); break;
		case 't': secs = atof(optarg); break;
		case 'S': seed = strtoull(optarg, NULL, 0); break;
		default: fprintf(stderr, "usage: soak -p PORT [-q QPS] [-n OPS] [-t S] [-S SEED] [SERVER]\n"); return 2;
		}
	}
	if (qps < 1 || qps > MAX_QPS) {
		fprintf(stderr, "soak: -q is 1 to %d\n", MAX_QPS);
		return 2;
	}
	const char *server = optind < argc ? argv[optind] : NULL;
	int client = server != NULL;
	rng_state = seed;

	struct ibv_context *ctx = open_first(client ? "client" : "server");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	size_t len = (size_t)qps * REGION;
	uint8_t *buf = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	memset(buf, 0, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE |
							  IBV_ACCESS_REMOTE_WRITE |
							  IBV_ACCESS_REMOTE_READ |
							  IBV_ACCESS_REMOTE_ATOMIC);
	int cqe = qps * (client ? DEPTH : RECVS) + 16;
	struct ibv_cq *cq = ibv_create_cq(ctx, cqe, NULL, NULL, 0);
	CHECK("setup", pd && buf && mr && cq, "pd %p mr %p cq %p: %s", (void *)pd,
	      (void *)mr, (void *)cq, strerror(errno));
	if (!pd || !mr || !cq)
		return 1;
	struct ibv_qp *qp[MAX_QPS];
	struct peer me = {.addr = (uintptr_t)buf, .rkey = mr->rkey, .qps = (uint32_t)qps}, them;
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 0, &gid);
	memcpy(me.gid, gid.raw, 16);
	for (int q = 0; q < qps; q++) {
		struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					      .cap = {.max_send_wr = DEPTH, .max_recv_wr = RECVS,
						      .max_send_sge = 1, .max_recv_sge = 1}};
		qp[q] = ibv_create_qp(pd, &ia);
		if (!qp[q]) {
			printf("FAIL create QP %d: %s\n", q, strerror(errno));
			return 1;
		}
		me.qpn[q] = qp[q]->qp_num;
	}
	int fd = client ? tcp_connect(server, port) : tcp_accept(port);
	io_all(fd, &me, sizeof me, 1);
	io_all(fd, &them, sizeof them, 0);
	CHECK("same QP count", them.qps == me.qps, "%u against %u", them.qps, me.qps);
	int up = 0;
	for (int q = 0; q < qps; q++)
		up += to_rts(qp[q], them.qpn[q], them.gid) == 0;
	CHECK("QPs to RTS", up == qps, "%d of %d", up, qps);

	struct counts c = {0};
	if (!client) {
		/* The source areas hold their pattern; receives are posted. */
		for (int q = 0; q < qps; q++) {
			uint8_t *r = buf + (size_t)q * REGION;
			for (int i = 0; i < MAX_SIZE; i++)
				r[SOURCE_AT + i] = source_byte((uint64_t)i);
			for (int k = 0; k < RECVS; k++) {
				struct ibv_sge s = {.addr = (uintptr_t)(r + RECV_AT + (size_t)k * MAX_SIZE),
						    .length = MAX_SIZE, .lkey = mr->lkey};
				struct ibv_recv_wr w = {.wr_id = ((uint64_t)q << 32) | (uint64_t)k,
							.sg_list = &s, .num_sge = 1}, *bad;
				if (ibv_post_recv(qp[q], &w, &bad)) {
					printf("FAIL post_recv: %s\n", strerror(errno));
					return 1;
				}
			}
		}
		uint8_t ready = 1;
		io_all(fd, &ready, 1, 1);
		uint64_t got[MAX_QPS] = {0}, bad_data = 0, bad_status = 0, expect_op[MAX_QPS];
		int done = 0;
		memset(expect_op, 0xff, sizeof expect_op);
		while (!done) {
			struct ibv_wc wc[16];
			int n = ibv_poll_cq(cq, 16, wc);
			for (int i = 0; i < n; i++) {
				int q = (int)(wc[i].wr_id >> 32), k = (int)(uint32_t)wc[i].wr_id;
				if (wc[i].status != IBV_WC_SUCCESS || q >= qps) {
					if (bad_status++ < 5)
						printf("FAIL receive: status %s\n", ibv_wc_status_str(wc[i].status));
					continue;
				}
				uint8_t *m = buf + (size_t)q * REGION + RECV_AT + (size_t)k * MAX_SIZE;
				uint64_t op;
				memcpy(&op, m, 8);
				for (uint32_t j = 8; j < wc[i].byte_len; j++) {
					if (m[j] != pattern(op, j)) {
						if (bad_data++ < 5)
							printf("FAIL SEND %llu on QP %d: byte %u\n",
							       (unsigned long long)op, q, j);
						break;
					}
				}
				/* SENDs of a QP arrive in the order they were sent. */
				if (expect_op[q] != UINT64_MAX && op <= expect_op[q] && bad_data++ < 5)
					printf("FAIL SEND %llu on QP %d after %llu\n", (unsigned long long)op,
					       q, (unsigned long long)expect_op[q]);
				expect_op[q] = op;
				got[q]++;
				struct ibv_sge s = {.addr = (uintptr_t)m, .length = MAX_SIZE, .lkey = mr->lkey};
				struct ibv_recv_wr w = {.wr_id = wc[i].wr_id, .sg_list = &s, .num_sge = 1}, *bad;
				if (ibv_post_recv(qp[q], &w, &bad))
					bad_status++;
			}
			if (n == 0) {
				struct pollfd p = {.fd = fd, .events = POLLIN};
				if (poll(&p, 1, 0) == 1)
					done = 1;
			}
		}
		io_all(fd, &c, sizeof c, 0);
		/* Receives that completed after the client's last completion
		 * can still be in the CQ. */
		double until = now_s() + 5;
		uint64_t all = 0, sent = 0;
		for (int q = 0; q < qps; q++)
			sent += c.sends[q];
		for (;;) {
			all = 0;
			for (int q = 0; q < qps; q++)
				all += got[q];
			if (all >= sent || now_s() > until)
				break;
			struct ibv_wc wc[16];
			int n = ibv_poll_cq(cq, 16, wc);
			for (int i = 0; i < n; i++)
				if (wc[i].status == IBV_WC_SUCCESS)
					got[wc[i].wr_id >> 32]++;
		}
		int fine = 1;
		for (int q = 0; q < qps; q++) {
			uint64_t faa, cas;
			memcpy(&faa, buf + (size_t)q * REGION + ATOMIC_AT, 8);
			memcpy(&cas, buf + (size_t)q * REGION + ATOMIC_AT + 8, 8);
			if (got[q] != c.sends[q] || faa != c.faas[q] || cas != c.cass[q]) {
				printf("FAIL QP %d: %llu of %llu SENDs, counter %llu of %llu, chain %llu of %llu\n",
				       q, (unsigned long long)got[q], (unsigned long long)c.sends[q],
				       (unsigned long long)faa, (unsigned long long)c.faas[q],
				       (unsigned long long)cas, (unsigned long long)c.cass[q]);
				fine = 0;
			}
		}
		CHECK("every SEND arrived once, in order, intact", bad_data == 0 && bad_status == 0,
		      "%llu bad, %llu errors", (unsigned long long)bad_data,
		      (unsigned long long)bad_status);
		CHECK("every add and swap applied exactly once", fine, "see above");
		uint8_t verdict = (uint8_t)(failures == 0);
		io_all(fd, &verdict, 1, 1);
		printf("server: %llu SENDs\n", (unsigned long long)all);
		printf("%d failed\n", failures);
		return failures != 0;
	}

	/* The client. */
	uint8_t ready;
	io_all(fd, &ready, 1, 0);
	struct pending pend[MAX_QPS][DEPTH];
	uint64_t posted[MAX_QPS] = {0}, completed[MAX_QPS] = {0}, faa_next[MAX_QPS] = {0},
		 cas_next[MAX_QPS] = {0};
	uint64_t op = 0, done_ops = 0, bad = 0, kinds[6] = {0};
	int want_readback[MAX_QPS] = {0};
	uint64_t readback_of[MAX_QPS], readback_len[MAX_QPS], readback_slot[MAX_QPS];
	double start = now_s(), stuck_at = start + 30;
	int q = 0;
	while (1) {
		int more = secs > 0 ? now_s() - start < secs : op < ops;
		int outstanding = 0;
		for (int k = 0; k < qps; k++)
			outstanding += posted[k] != completed[k];
		if (!more && !outstanding)
			break;
		/* Post on the next QP that has room. */
		for (int tries = 0; tries < qps; tries++, q = (q + 1) % qps) {
			if (posted[q] - completed[q] >= DEPTH || (!more && !want_readback[q]))
				continue;
			uint8_t *local = buf + (size_t)q * REGION;
			uint64_t remote = them.addr + (uint64_t)q * REGION;
			uint32_t slot = (uint32_t)(posted[q] % DEPTH);
			struct pending *p = &pend[q][slot];
			struct ibv_sge s = {.lkey = mr->lkey};
			struct ibv_send_wr w = {.wr_id = ((uint64_t)q << 32) | slot, .sg_list = &s,
						.num_sge = 1, .send_flags = IBV_SEND_SIGNALED}, *badwr;
			if (want_readback[q]) {
				/* The READ that checks the WRITE before it. */
				want_readback[q] = 0;
				*p = (struct pending){.kind = READBACK, .op = readback_of[q],
						      .len = (uint32_t)readback_len[q]};
				s.addr = (uintptr_t)(local + C_IN_AT + (size_t)slot * MAX_SIZE);
				s.length = p->len;
				memset((void *)(uintptr_t)s.addr, 0, p->len);
				w.opcode = IBV_WR_RDMA_READ;
				w.wr.rdma.remote_addr = remote + SLOTS_AT + readback_slot[q] * MAX_SIZE;
				w.wr.rdma.rkey = them.rkey;
			} else {
				uint64_t r = next_random();
				uint32_t size = 8 + (uint32_t)((r >> 8) % (MAX_SIZE - 8));
				enum kind k = (r % 100) < 30 ? WRITE : (r % 100) < 50 ? READ
					      : (r % 100) < 70 ? SEND : (r % 100) < 85 ? FAA : CAS;
				*p = (struct pending){.kind = k, .op = op, .len = size};
				uint8_t *out = local + C_OUT_AT + (size_t)slot * MAX_SIZE;
				s.addr = (uintptr_t)out;
				s.length = size;
				switch (k) {
				case WRITE:
				case SEND:
					for (uint32_t j = 0; j < size; j++)
						out[j] = pattern(op, j);
					if (k == SEND) {
						memcpy(out, &op, 8);
						w.opcode = IBV_WR_SEND;
					} else {
						w.opcode = IBV_WR_RDMA_WRITE;
						uint64_t ws = posted[q] % WRITE_SLOTS;
						w.wr.rdma.remote_addr = remote + SLOTS_AT + ws * MAX_SIZE;
						w.wr.rdma.rkey = them.rkey;
						want_readback[q] = 1;
						readback_of[q] = op;
						readback_len[q] = size;
						readback_slot[q] = ws;
					}
					break;
				case READ:
					p->offset = (uint32_t)((r >> 32) % (MAX_SIZE - size + 1));
					s.addr = (uintptr_t)(local + C_IN_AT + (size_t)slot * MAX_SIZE);
					memset((void *)(uintptr_t)s.addr, 0, size);
					w.opcode = IBV_WR_RDMA_READ;
					w.wr.rdma.remote_addr = remote + SOURCE_AT + p->offset;
					w.wr.rdma.rkey = them.rkey;
					break;
				default:
					p->len = 8;
					s.addr = (uintptr_t)(local + C_ATOMIC_AT + (size_t)slot * 8);
					s.length = 8;
					w.wr.atomic.rkey = them.rkey;
					if (k == FAA) {
						w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
						w.wr.atomic.remote_addr = remote + ATOMIC_AT;
						w.wr.atomic.compare_add = 1;
						p->expect = faa_next[q]++;
					} else {
						w.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
						w.wr.atomic.remote_addr = remote + ATOMIC_AT + 8;
						w.wr.atomic.compare_add = cas_next[q];
						w.wr.atomic.swap = cas_next[q] + 1;
						p->expect = cas_next[q]++;
					}
				}
				if (k == SEND)
					c.sends[q]++;
				op++;
			}
			if (ibv_post_send(qp[q], &w, &badwr)) {
				printf("FAIL post_send on QP %d: %s\n", q, strerror(errno));
				return 1;
			}
			posted[q]++;
		}
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(cq, 16, wc);
		if (n > 0)
			stuck_at = now_s() + 30;
		else if (now_s() > stuck_at) {
			printf("FAIL no completion for 30 s\n");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			int k = (int)(wc[i].wr_id >> 32);
			uint32_t slot = (uint32_t)wc[i].wr_id;
			if (wc[i].status != IBV_WC_SUCCESS) {
				printf("FAIL QP %d: %s\n", k, ibv_wc_status_str(wc[i].status));
				return 1;
			}
			/* In posting order, per QP. */
			if (slot != completed[k] % DEPTH && bad++ < 5)
				printf("FAIL QP %d: slot %u completed, %llu expected\n", k, slot,
				       (unsigned long long)(completed[k] % DEPTH));
			completed[k]++;
			struct pending *p = &pend[k][slot];
			uint8_t *local = buf + (size_t)k * REGION;
			uint8_t *in = local + C_IN_AT + (size_t)slot * MAX_SIZE;
			uint64_t old;
			kinds[p->kind]++;
			switch (p->kind) {
			case READBACK:
				for (uint32_t j = 0; j < p->len; j++)
					if (in[j] != pattern(p->op, j)) {
						if (bad++ < 5)
							printf("FAIL WRITE %llu read back: byte %u\n",
							       (unsigned long long)p->op, j);
						break;
					}
				break;
			case READ:
				for (uint32_t j = 0; j < p->len; j++)
					if (in[j] != source_byte(p->offset + j)) {
						if (bad++ < 5)
							printf("FAIL READ %llu: byte %u\n", (unsigned long long)p->op, j);
						break;
					}
				done_ops++;
				break;
			case FAA:
			case CAS:
				memcpy(&old, local + C_ATOMIC_AT + (size_t)slot * 8, 8);
				if (old != p->expect && bad++ < 5)
					printf("FAIL %s %llu on QP %d: old value %llu, %llu expected\n",
					       p->kind == FAA ? "add" : "swap", (unsigned long long)p->op, k,
					       (unsigned long long)old, (unsigned long long)p->expect);
				if (p->kind == FAA)
					c.faas[k]++;
				else
					c.cass[k]++;
				done_ops++;
				break;
			default:
				done_ops++;
			}
		}
	}
	double took = now_s() - start;
	CHECK("every byte and every atomic as expected, completions in order", bad == 0,
	      "%llu wrong", (unsigned long long)bad);
	io_all(fd, &c, sizeof c, 1);
	uint8_t verdict = 0;
	io_all(fd, &verdict, 1, 0);
	CHECK("the server found every SEND, add and swap", verdict == 1, "it did not");
	printf("client: %llu operations in %.2f s (%llu WRITE, %llu READ, %llu SEND, %llu add, %llu swap)\n",
	       (unsigned long long)op, took, (unsigned long long)kinds[WRITE],
	       (unsigned long long)kinds[READ], (unsigned long long)kinds[SEND],
	       (unsigned long long)kinds[FAA], (unsigned long long)kinds[CAS]);
	(void)done_ops;
	printf("%d failed\n", failures);
	return failures != 0;
}
