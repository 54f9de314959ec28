/*
 * frame.h: the tether.v1 tunnel frames and their msgpack codec.
 *
 * Each binary WebSocket message is exactly one frame: a msgpack array whose
 * first element is the frame type (a positive integer).  Control frames are
 * [type, map]; stream frames are [type, stream_id, ...] with fixed positions
 * so that DATA can be built without copying its payload:
 *
 *   HELLO       [1, {"versions":[int...], "node":str, "cred":"import"|"agent", "id":str, "version":str?}]
 *   CHALLENGE   [2, {"version":int, "nonce":bin(32)}]
 *   AUTH        [3, {"sig":bin(64), "next_pubkey":bin(32)?, "next_sig":bin(64)?}]
 *   REGISTER    [4, {"pubkey":bin(32), "node":str, "hostname":str, "client_version":str,
 *                    "key_sig":bin(64)?}]
 *   REGISTERED  [5, {"agent_id":str, "cluster":str, "goes_on":int?}]
 *               ("key_sig": the new key's signature over AUTH's transcript,
 *               asking to go on as the agent on this connection; "goes_on":
 *               1 when the gateway does, a WELCOME follows: docs/0044)
 *   WELCOME     [6, {"agent_id":str, "cluster":str, "state":str, "key":str?}]
 *   STATE       [7, {"state":str, "last_error":str}]        gateway -> agent
 *   VERIFY      [8, {"nonce":bin(16), "time_ms":int}]        gateway -> agent
 *   VERIFY_OK   [9, {"nonce":bin(16), "time_ms":int, "version":int}]
 *   ERROR       [10, {"code":str, "reason":str, "retry_after_ms":int}]
 *               ("retry_after_ms": gateway -> agent, only on a refusal that
 *               means "come back later", absent otherwise: docs/interface.md)
 *   PING        [11, {"seq":int}]
 *   PONG        [12, {"seq":int}]
 *   RECONNECT   [13, {"reason":str, "jitter_ms":int, "elsewhere":int?}]
 *                                                        gateway -> agent
 *   SETTINGS    [14, {"urls":[str...]?, "ca":{"phase":"overlap"|"final",
 *                     "next":bin, "cross":bin?}?, "redial_spread_ms":int?}]
 *                                                        gateway -> agent
 *   SETTINGS_ACK [15, {"urls":[str...]?, "ca":{"held":[str...]}?}]
 *                                                        agent -> gateway
 *   KEY_ROTATE  [16, {"nonce":bin(32)?}]   gateway -> agent: rotate now
 *               (with nonce); agent -> gateway: please ask me (without)
 *   KEY_PROOF   [17, {"pubkey":bin(32), "old_pubkey":bin(32),
 *                     "old_sig":bin(64), "new_sig":bin(64)}]  agent -> gateway
 *   KEY_ROTATED [18, {"pubkey":bin(32)}]   gateway -> agent: new key staged
 *   KEY_SWITCHED [19, {"pubkey":bin(32)}]  agent -> gateway: it uses only it
 *               (node key rotation: auth/agentkey.h, docs/interface.md)
 *   OPEN        [20, stream_id, {"target":str, "service":str, "window":int,
 *                                "agent":str, "principal":str}]
 *               ("agent" and "principal": only on a link between two gateway
 *               replicas, docs/0020; absent when empty, ignored by agents)
 *   OPEN_OK     [21, stream_id, {"window":int}]
 *   OPEN_FAIL   [22, stream_id, {"code":str, "reason":str}]
 *   DATA        [23, stream_id, bin]
 *   WINDOW      [24, stream_id, credit:int]
 *   FIN         [25, stream_id]
 *   RESET       [26, stream_id, code:str]
 *
 * Maps may carry keys this version does not know; the decoder skips them so
 * that a newer peer still talks to an older one.  A frame type this version
 * does not know is told apart (FRAME_UNKNOWN_TYPE) so that a peer may ignore
 * what a newer one sends.  A missing required key, a value of the wrong
 * type, an over-long string or trailing bytes after the array is an error
 * with a reason.
 *
 * Ownership: frame_decode copies every string into the struct's fixed arrays
 * (NUL-terminated) and copies fixed-size binaries; only DATA's payload
 * pointer refers into the caller's input buffer and is valid as long as it.
 */
#ifndef TETHER_FRAME_H
#define TETHER_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TETHER_PROTOCOL_VERSION 1 /* highest version this build speaks */
#define TETHER_SUBPROTOCOL "tether.v1"

#define FRAME_MAX_VERSIONS   8
#define FRAME_NODE_MAX       63   /* node names: [A-Za-z0-9._-], 1..63 */
#define FRAME_ID_MAX         63   /* credential, agent and cluster ids */
#define FRAME_STATE_MAX      31
#define FRAME_CODE_MAX       31
#define FRAME_REASON_MAX     255
#define FRAME_TARGET_MAX     255  /* "host:port" or a service name */
#define FRAME_PRINCIPAL_MAX  127  /* "user:NAME", "admin:TOKEN_ID" */
#define FRAME_NONCE_LEN      32   /* CHALLENGE nonce */
#define FRAME_VERIFY_NONCE_LEN 16
#define FRAME_PUBKEY_LEN     32   /* Ed25519 public key */
#define FRAME_SIG_LEN        64   /* Ed25519 signature */
#define FRAME_DATA_HEADER_MAX 16  /* bytes frame_data_header may write */
#define FRAME_MAX_URLS       8    /* SETTINGS: gateway URLs in the list */
#define FRAME_URL_MAX        255  /* each, https://HOST[:PORT] */
#define FRAME_CA_DER_MAX     4096 /* SETTINGS "ca": each certificate's DER */
#define FRAME_CA_MAX_HELD    4    /* SETTINGS_ACK "ca": CAs listed (1 or 2 now) */
#define FRAME_CA_SUM_LEN     71   /* "sha256:" + 64 lowercase hex digits */

enum frame_type {
	FRAME_HELLO = 1,
	FRAME_CHALLENGE = 2,
	FRAME_AUTH = 3,
	FRAME_REGISTER = 4,
	FRAME_REGISTERED = 5,
	FRAME_WELCOME = 6,
	FRAME_STATE = 7,
	FRAME_VERIFY = 8,
	FRAME_VERIFY_OK = 9,
	FRAME_ERROR = 10,
	FRAME_PING = 11,
	FRAME_PONG = 12,
	FRAME_RECONNECT = 13,
	FRAME_SETTINGS = 14,
	FRAME_SETTINGS_ACK = 15,
	FRAME_KEY_ROTATE = 16,
	FRAME_KEY_PROOF = 17,
	FRAME_KEY_ROTATED = 18,
	FRAME_KEY_SWITCHED = 19,
	FRAME_OPEN = 20,
	FRAME_OPEN_OK = 21,
	FRAME_OPEN_FAIL = 22,
	FRAME_DATA = 23,
	FRAME_WINDOW = 24,
	FRAME_FIN = 25,
	FRAME_RESET = 26,
};

/* Credential kinds named in HELLO. */
enum frame_cred {
	FRAME_CRED_IMPORT = 1, /* an import token: may only REGISTER */
	FRAME_CRED_AGENT = 2,  /* an agent's Ed25519 key */
};

struct frame_hello {
	uint32_t versions[FRAME_MAX_VERSIONS];
	size_t nversions;                 /* 1..FRAME_MAX_VERSIONS */
	char node[FRAME_NODE_MAX + 1];
	enum frame_cred cred;
	char id[FRAME_ID_MAX + 1];
	char version[FRAME_ID_MAX + 1];   /* the agent's release; optional,
	                                   * "" if absent (an older agent) */
};

struct frame_challenge {
	uint32_t version;
	uint8_t nonce[FRAME_NONCE_LEN];
};

/* next_*: all zero unless the agent holds a pending key (a rotation whose
 * outcome it did not learn): then next_sig is that key's signature over the
 * same transcript as sig. */
struct frame_auth {
	uint8_t sig[FRAME_SIG_LEN];
	uint8_t next_pubkey[FRAME_PUBKEY_LEN];
	uint8_t next_sig[FRAME_SIG_LEN];
};

/* key_sig: all zero (absent) from an agent that redials with its key
 * after REGISTERED; else pubkey's signature over the same transcript as
 * AUTH's sig (docs/0044). */
struct frame_register {
	uint8_t pubkey[FRAME_PUBKEY_LEN];
	char node[FRAME_NODE_MAX + 1];
	char hostname[FRAME_NODE_MAX + 1];   /* optional, "" if absent */
	char client_version[FRAME_ID_MAX + 1]; /* optional, "" if absent */
	uint8_t key_sig[FRAME_SIG_LEN];
};

/* goes_on: 1 when the tunnel goes on as the agent (a WELCOME follows on
 * this connection); 0 (absent) when the gateway closes it and the agent
 * redials with its key. */
struct frame_registered {
	char agent_id[FRAME_ID_MAX + 1];
	char cluster[FRAME_ID_MAX + 1];
	uint32_t goes_on;
};

struct frame_welcome {
	char agent_id[FRAME_ID_MAX + 1];
	char cluster[FRAME_ID_MAX + 1];
	char state[FRAME_STATE_MAX + 1];
	/* "next": AUTH's next_pubkey is this agent's key now; "current" or
	 * "" (an older gateway): the key that made sig is, and the pending
	 * one is to be dropped. */
	char key[FRAME_STATE_MAX + 1];
};

struct frame_state {
	char state[FRAME_STATE_MAX + 1];
	char last_error[FRAME_REASON_MAX + 1]; /* optional, "" if absent */
};

struct frame_verify {
	uint8_t nonce[FRAME_VERIFY_NONCE_LEN];
	int64_t time_ms;                  /* sender's wall clock, Unix ms */
	uint32_t version;                 /* VERIFY_OK only: agent's protocol version */
};

struct frame_error {
	char code[FRAME_CODE_MAX + 1];
	char reason[FRAME_REASON_MAX + 1];
	uint32_t retry_after_ms;   /* optional: when to come back; 0 = not said
	                            * (then left out of the map) */
};

struct frame_ping {
	uint64_t seq;
};

/*
 * RECONNECT: the gateway is draining (SIGTERM).  The agent waits a random
 * delay in [0, jitter_ms], then dials a new tunnel (through the balancer, to
 * another replica) and keeps this one only until its streams have ended.
 * elsewhere (1, or absent: 0) says another replica is live: a redial the
 * balancer sends back to the draining one is refused for now, and the agent
 * keeps this tunnel until a new one is up (docs/0017).
 */
struct frame_reconnect {
	char reason[FRAME_REASON_MAX + 1];  /* for the log, may be "" */
	uint32_t jitter_ms;
	uint32_t elsewhere;                 /* 1: another replica is live */
};

/*
 * SETTINGS: what the gateway pushes to an established agent, over the
 * tunnel it authenticated (so with the trust the agent joined with), after
 * WELCOME and whenever a setting changes; SETTINGS_ACK: the agent's answer,
 * the same keys holding what it now keeps (docs/interface.md, "Settings").
 * Every key is optional: an absent one means "no word on this", so a frame
 * may carry one setting, and a later release adds keys that an older agent
 * skips (the decoder's rule for unknown keys).  To add a setting: a member
 * here, one line in frame.c's settings_keys (and in settings_ack_keys when
 * the agent says what it holds of it), its handling in the agent.
 */
struct frame_urls {
	bool present;              /* the key was there; an empty list is a
	                            * list ("none: use the join URL") */
	size_t n;                  /* 0..FRAME_MAX_URLS */
	char url[FRAME_MAX_URLS][FRAME_URL_MAX + 1];
};

/*
 * "ca": a CA rotation (docs/0033).  In SETTINGS the gateway's word: phase
 * and next (DER of the new CA certificate), cross (DER of the new CA's
 * cross-certificate issued by the current one; required in "overlap",
 * optional in "final").  In SETTINGS_ACK the agent's: held, the checksums
 * of the CAs it trusts now (sha256 of the DER, as the join document's
 * ca_checksum).  Each direction's members only: the other's are refused.
 * The decoder checks sizes and syntax; whether the certificates mean
 * anything is the agent's to check (tunnel-client/catrust.h).
 */
enum frame_ca_phase {
	FRAME_CA_NONE = 0,     /* absent (SETTINGS_ACK) */
	FRAME_CA_OVERLAP = 1,  /* trust next as well as the current CA */
	FRAME_CA_FINAL = 2,    /* next is the only CA now */
};

struct frame_ca {
	bool present;                      /* the key was there */
	enum frame_ca_phase phase;         /* SETTINGS */
	size_t next_len;                   /* SETTINGS: 1..FRAME_CA_DER_MAX */
	uint8_t next[FRAME_CA_DER_MAX];
	size_t cross_len;                  /* 0 (absent)..FRAME_CA_DER_MAX */
	uint8_t cross[FRAME_CA_DER_MAX];
	size_t nheld;                      /* SETTINGS_ACK: 1..FRAME_CA_MAX_HELD */
	char held[FRAME_CA_MAX_HELD][FRAME_CA_SUM_LEN + 1];
};

struct frame_settings {
	struct frame_urls urls;    /* "urls": the gateway's public URLs, in
	                            * the order agents should dial them */
	struct frame_ca ca;        /* "ca": a CA rotation's step, or (ACK)
	                            * the CAs the agent holds */
	uint32_t redial_spread_ms; /* "redial_spread_ms" (SETTINGS only): how
	                            * widely to spread the first redial after
	                            * losing this gateway unannounced
	                            * (docs/0035); 0: absent, no word */
};

/* KEY_ROTATE: nonce all zero when an agent asks for a rotation. */
struct frame_key_rotate {
	uint8_t nonce[FRAME_NONCE_LEN];
};

/* KEY_PROOF: both signatures over key_rotation_transcript (agentkey.h). */
struct frame_key_proof {
	uint8_t pubkey[FRAME_PUBKEY_LEN];      /* the new key */
	uint8_t old_pubkey[FRAME_PUBKEY_LEN];  /* the key the agent holds now */
	uint8_t old_sig[FRAME_SIG_LEN];
	uint8_t new_sig[FRAME_SIG_LEN];
};

/* KEY_ROTATED and KEY_SWITCHED: which new key they speak of. */
struct frame_key_done {
	uint8_t pubkey[FRAME_PUBKEY_LEN];
};

struct frame_open {
	char target[FRAME_TARGET_MAX + 1];  /* "host:port", or "" with service */
	char service[FRAME_ID_MAX + 1];     /* e.g. "kube-api", or "" */
	uint32_t window;                    /* initial credit granted to the peer */
	/* Peer links only (docs/0020), "" otherwise: the agent whose tunnel
	 * the far replica holds, and who asks for the stream. */
	char agent[FRAME_ID_MAX + 1];
	char principal[FRAME_PRINCIPAL_MAX + 1];
};

struct frame_open_fail {
	char code[FRAME_CODE_MAX + 1];
	char reason[FRAME_REASON_MAX + 1];
};

struct frame_data {
	const uint8_t *payload;   /* points into the decoded input */
	size_t len;
};

struct frame {
	enum frame_type type;
	uint32_t stream_id;       /* stream frames only */
	union {
		struct frame_hello hello;
		struct frame_challenge challenge;
		struct frame_auth auth;
		struct frame_register reg;
		struct frame_registered registered;
		struct frame_welcome welcome;
		struct frame_state state;
		struct frame_verify verify;       /* VERIFY and VERIFY_OK */
		struct frame_error error;
		struct frame_ping ping;           /* PING and PONG */
		struct frame_reconnect reconnect;
		struct frame_settings settings;   /* SETTINGS and SETTINGS_ACK */
		struct frame_key_rotate key_rotate;
		struct frame_key_proof key_proof;
		struct frame_key_done key_done;   /* KEY_ROTATED, KEY_SWITCHED */
		struct frame_open open;
		uint32_t open_ok_window;          /* OPEN_OK */
		struct frame_open_fail open_fail;
		struct frame_data data;
		uint32_t window_credit;           /* WINDOW: > 0 */
		char reset_code[FRAME_CODE_MAX + 1]; /* RESET */
	} u;
};

/* frame_decode's answer for a well-formed frame of an unknown type. */
#define FRAME_UNKNOWN_TYPE 1

/*
 * Decodes exactly one frame from buf[0..len).  Returns 0 and fills *f: its
 * type, stream_id and the member of f->u its type uses (zeroed, then
 * decoded); the rest of f->u is left as it was, as zeroing all 10.6 KB
 * cost a /k8s request ~9 % of its instructions.  Or -1 (*f zeroed)
 * with a human-readable reason in err (e.g. "HELLO: missing key \"node\""),
 * or FRAME_UNKNOWN_TYPE (err "unknown frame type N", *f zeroed) for one
 * complete msgpack array whose first element is a frame type this version
 * does not know: a newer peer's frame, which the caller may skip (the
 * tunnel does once established: docs/interface.md).  Never reads outside
 * buf; len 0 is an error.
 */
int frame_decode(const uint8_t *buf, size_t len, struct frame *f,
    char *err, size_t errlen);

/*
 * Encodes f into a fresh buffer of headroom + n bytes, the frame starting at
 * (*out + headroom) (headroom lets a transport prepend its own header without
 * a copy).  *outlen is n, the frame's length without headroom.
 * Returns 0, or -1 if f is invalid (a field over its limit, unknown type).
 * The caller frees *out.
 */
int frame_encode(const struct frame *f, size_t headroom, uint8_t **out,
    size_t *outlen);

/*
 * Writes the msgpack prefix of a DATA frame carrying payload_len bytes
 * ([23, stream_id, bin header]) into hdr (at least FRAME_DATA_HEADER_MAX
 * bytes) and returns its length; the payload follows it unchanged.  This is
 * the zero-copy path for bulk data.
 */
size_t frame_data_header(uint8_t *hdr, uint32_t stream_id, size_t payload_len);

/* "HELLO", "DATA", ... or "UNKNOWN" for logs and error messages. */
const char *frame_type_name(int type);

/* Convenience builders for the frames every phase sends on failure. */
void frame_make_error(struct frame *f, const char *code, const char *reason);

/* Fills an OPEN's request: target or service (NULL: ""), agent and
 * principal empty, window 0.  Strings are cut at the fields' sizes (callers
 * check lengths first: an OPEN with a cut name would go elsewhere). */
void frame_open_init(struct frame_open *o, const char *target, const char *service);

#endif
