/*
 * fake_tunnel.h: a gateway for unit tests of the agent layers and above
 * (test_session, test_reach, test_relay): a real SQLite store in a temp
 * dir, the real store thread, a hub of real sessions, and agent tunnels
 * whose transport (struct session_transport) is the test's own.
 *
 * A fake tunnel records the frames its session sends and whether it was
 * closed.  Its bulk path (the session's mux) queues each message; with an
 * agent-side multiplexer attached (ft_tun_attach) ft_pump carries the
 * messages both ways, so that streams run end to end in one process.
 *
 * Every function asserts (cmocka) what it needs; none returns an error.
 */
#ifndef TETHER_TEST_FAKE_TUNNEL_H
#define TETHER_TEST_FAKE_TUNNEL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <openssl/evp.h>

#include "frame.h"
#include "gateway.h"
#include "store.h"
#include "token.h"

struct event;
struct evbuffer;
struct mux;
struct mux_handlers;

#define FT_SENT_MAX 32
#define FT_TUNS_MAX 6
#define FT_OPS_MAX 48

/* One fake tunnel: what its session sent and whether it closed it. */
struct ft_tun {
	struct ft *ft;
	struct session *s;            /* NULL once gone (ft_tun_gone) */
	struct frame sent[FT_SENT_MAX];
	int nsent;
	int closed;                   /* close() calls */
	int sends_after_close;        /* frames queued once closed: must stay 0 */
	struct evbuffer *to_agent;    /* the session mux's messages, queued */
	struct evbuffer *to_gateway;  /* the agent mux's messages, queued */
	struct mux *agent;            /* the agent's side, or NULL */
};

/* The gateway under test. */
struct ft {
	char dir[64];
	struct gateway gw;
	struct store *st;             /* the test's own connection */
	char cluster[STORE_ID_MAX + 1];
	struct ft_tun tun[FT_TUNS_MAX];
	int ntun;
	struct event *watchdog;       /* a wait that would never end fails */
	int expired;
	/* The store thread's calls by name (store_set_timing's op), counted
	 * by its timing hook under ops_mu. */
	pthread_mutex_t ops_mu;
	struct {
		char op[48];
		int n;
	} ops[FT_OPS_MAX];
	int nops;
};

/* A gateway (replica "r-here") with one cluster "one", its store thread
 * queueing cap jobs at most.  ft_free ends every tunnel still open and
 * checks that the hub is empty and no handshake is counted. */
struct ft *ft_new(size_t cap);
void ft_free(struct ft *f);

/* A new tunnel with its session, in AWAIT_HELLO. */
struct ft_tun *ft_tun_open(struct ft *f);
/* The transport went away: session_closed, then the agent mux is freed. */
void ft_tun_gone(struct ft_tun *t);
/* Encodes fr and hands it to t's session as one WebSocket message. */
void ft_deliver(struct ft_tun *t, const struct frame *fr);
/* Runs the loop until t sent n frames or was closed (fails after a
 * watchdog of several seconds: a wait that never ends, not a timing goal). */
void ft_wait_sent(struct ft_tun *t, int n);
/* How many calls named op ("agent_transition": store.h's names without
 * "store_") the sessions' store thread has made since ft_new; the test's
 * own connection (f->st) is not counted.  Call once the answers needed
 * have come (ft_wait_sent). */
int ft_store_calls(struct ft *f, const char *op);
/* Runs the loop once: until something happens (watchdog included). */
void ft_loop_once(struct ft *f);
const struct frame *ft_last(const struct ft_tun *t);
/* t was refused: its last frame is ERROR(code), the transport was closed
 * once and nothing followed; a frame sent now is ignored. */
void ft_assert_refused(struct ft_tun *t, const char *code);

void ft_make_hello(struct frame *h, enum frame_cred cred, const char *id,
    const char *node);
/* HELLO, then the CHALLENGE it gets (asserted; t has sent nothing before). */
const struct frame_challenge *ft_hello(struct ft_tun *t, enum frame_cred cred,
    const char *id, const char *node);
/* AUTH: key's signature over the transcript of (cred, id, node, nonce). */
void ft_auth(struct ft_tun *t, EVP_PKEY *key, enum frame_cred cred, const char *id,
    const char *node, const uint8_t nonce[FRAME_NONCE_LEN]);
/* REGISTER of node with agent_key's public key. */
void ft_register(struct ft_tun *t, EVP_PKEY *agent_key, const char *node);
/* The same with a key proof (docs/0044): prover's signature over the
 * import transcript of (id, node, nonce), as a newer agent sends it with
 * prover its agent_key. */
void ft_register_proven(struct ft_tun *t, EVP_PKEY *agent_key, EVP_PKEY *prover,
    const char *id, const char *node, const uint8_t nonce[FRAME_NONCE_LEN]);

/* An import token of f's cluster in the store, as given; *tok its secret. */
void ft_make_import(struct ft *f, struct token *tok, int64_t expires_at,
    int64_t uses_left, bool revoked);
/* An agent of f's cluster named node, registered in the store (enroll);
 * *key its private key (the caller frees it). */
void ft_make_agent(struct ft *f, const char *node, EVP_PKEY **key,
    struct store_agent *a);
/* Moves a's record on by ev in the store (a is updated). */
void ft_transition(struct ft *f, struct store_agent *a, enum agent_event ev);
/* The same agent made active (enroll -> verifying -> active). */
void ft_make_active(struct ft *f, struct store_agent *a);
/* An agent's tunnel up to its WELCOME (asserted). */
struct ft_tun *ft_agent_connect(struct ft *f, const struct store_agent *a,
    EVP_PKEY *key);

/* Gives t an agent-side multiplexer (its streams opened by the gateway
 * reach h->on_open), with window per stream (0: the default). */
struct mux *ft_tun_attach(struct ft_tun *t, uint32_t window,
    const struct mux_handlers *h, void *arg);
/* Carries the messages queued now on every attached tunnel to the other
 * side (those they cause wait for the next call), tells each side's mux
 * when its queue is empty, and runs the loop's ready events (streams are
 * freed from it).  Returns how many messages it carried. */
size_t ft_pump(struct ft *f);

/* The queue of messages one side sent (a wire's direction): each one a
 * 4-byte length, then its bytes. */
int ft_queue_msg(struct evbuffer *q, const struct iovec *iov, int iovcnt);
/* Takes the first message of q into *buf (caller frees); 0 when q is empty. */
size_t ft_next_msg(struct evbuffer *q, uint8_t **buf);

#endif
