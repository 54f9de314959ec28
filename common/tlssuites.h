/*
 * tlssuites.h: the TLS cipher suites every Tether end offers, one place for
 * both sides: the gateway's listener (gateway/transport/server.c) and the
 * dialled side (common/wsclient.c: the agent, tether-swarm, tetherctl, the
 * peer links between replicas).
 *
 * TLS 1.3: AES-128-GCM first (as safe here, and measurably cheaper per
 * byte than the AES-256 that OpenSSL lists first), then AES-256-GCM and
 * ChaCha20-Poly1305.
 *
 * TLS 1.2 (a TLS-terminating balancer in front of the gateway, or a
 * TLS-inspecting proxy trusted with --trust-proxy-ca, that speaks no 1.3):
 * the AEAD suites with forward secrecy only; such a middlebox must offer
 * ECDHE with AES-GCM or ChaCha20-Poly1305 (docs/0024).  A server keeps the
 * suites a client offered for the connection's life (OpenSSL's
 * peer_ciphers and the raw list): this list makes it 10 suites with the
 * TLS 1.3 ones, not OpenSSL's default ~31, ~400 bytes less of the
 * gateway's memory per tunnel (docs/0018, "Idle memory, fourth pass").
 */
#ifndef TETHER_TLSSUITES_H
#define TETHER_TLSSUITES_H

/* For SSL_CTX_set_ciphersuites. */
#define TETHER_TLS13_SUITES \
	"TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
/* For SSL_CTX_set_cipher_list. */
#define TETHER_TLS12_CIPHERS "ECDHE+AESGCM:ECDHE+CHACHA20"

#endif
