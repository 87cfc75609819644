/* C test program for libnagare_logger_c, run by tests/c_program.rs against a
 * scripted forward server:  emit_test <server host:port> <refused host:port>
 * Exits 0 when every check passed. */
#include "nagare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__,     \
              __LINE__, #cond, nagare_last_error());                             \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

static void on_error(int code, const char *message, void *user_data) {
  (void)message;
  if (code == NAGARE_EIO) __atomic_add_fetch((int *)user_data, 1, __ATOMIC_SEQ_CST);
}

static int emit_seq(nagare_client *c, int seq, const char *src) {
  char buf[128];
  int n = snprintf(buf, sizeof buf, "{\"seq\":%d,\"message\":\"hello from c\",\"src\":\"%s\"}", seq, src);
  return nagare_emit_json(c, "c.test", buf, (size_t)n);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s <server host:port> <refused host:port>\n", argv[0]);
    return 2;
  }
  CHECK(strlen(nagare_version()) > 0);

  nagare_config *cfg = nagare_config_new();
  CHECK(cfg != NULL);
  CHECK(nagare_config_set(cfg, "servers", argv[1]) == NAGARE_OK);
  CHECK(nagare_config_set(cfg, "flush_interval", "10ms") == NAGARE_OK);
  CHECK(nagare_config_set(cfg, "require_ack", "true") == NAGARE_OK);
  CHECK(nagare_config_set(cfg, "no_such_option", "1") == NAGARE_EINVAL);
  CHECK(strstr(nagare_last_error(), "no_such_option") != NULL);
  CHECK(nagare_config_set(cfg, "overflow", "sometimes") == NAGARE_EINVAL);

  nagare_client *c = nagare_client_new(cfg);
  CHECK(c != NULL);

  /* JSON records */
  for (int i = 0; i < 100; i++) CHECK(emit_seq(c, i, "json") == NAGARE_OK);
  /* key/value records (string values) */
  for (int i = 100; i < 110; i++) {
    char seq[16];
    snprintf(seq, sizeof seq, "%d", i);
    const char *keys[] = {"seq", "src"};
    const char *values[] = {seq, "kv"};
    CHECK(nagare_emit_kv(c, "c.test", keys, values, 2) == NAGARE_OK);
  }
  /* a pre-encoded msgpack map {"seq": 110, "src": "mp"} */
  const uint8_t mp[] = {0x82, 0xa3, 's', 'e', 'q', 110, 0xa3, 's', 'r', 'c', 0xa2, 'm', 'p'};
  CHECK(nagare_emit_msgpack(c, "c.test", mp, sizeof mp) == NAGARE_OK);
  /* bad input is refused */
  CHECK(nagare_emit_json(c, "c.test", "[1]", 3) == NAGARE_EINVAL);
  CHECK(nagare_emit_json(c, "c.test", "{bad", 4) == NAGARE_EINVAL);
  CHECK(nagare_emit_json(c, NULL, "{}", 2) == NAGARE_EINVAL);

  CHECK(nagare_flush(c, 5000) == NAGARE_OK);
  nagare_stats st;
  CHECK(nagare_get_stats(c, &st) == NAGARE_OK);
  CHECK(st.sent == 111);
  CHECK(st.buffered == 0);
  CHECK(st.dropped == 0);

  /* fork: the parent's unflushed events stay with the parent; the child gets
   * a fresh buffer and connection. */
  for (int i = 200; i < 210; i++) CHECK(emit_seq(c, i, "parent") == NAGARE_OK);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    for (int i = 1000; i < 1010; i++)
      if (emit_seq(c, i, "child") != NAGARE_OK) _exit(3);
    int rc = nagare_flush(c, 5000);
    nagare_stats cs;
    nagare_get_stats(c, &cs);
    int rc2 = nagare_close(c, 2000);
    if (rc != NAGARE_OK || rc2 != NAGARE_OK || cs.sent != 10) {
      fprintf(stderr, "child: flush %d close %d sent %llu (%s)\n", rc, rc2,
              (unsigned long long)cs.sent, nagare_last_error());
      _exit(4);
    }
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(nagare_flush(c, 5000) == NAGARE_OK);
  CHECK(nagare_get_stats(c, &st) == NAGARE_OK);
  CHECK(st.sent == 121);
  CHECK(nagare_close(c, 5000) == NAGARE_OK);
  nagare_config_free(cfg);

  /* the error callback and counters, with a server that refuses */
  int calls = 0;
  cfg = nagare_config_new();
  CHECK(nagare_config_set(cfg, "servers", argv[2]) == NAGARE_OK);
  CHECK(nagare_config_set(cfg, "backoff_base", "10ms") == NAGARE_OK);
  CHECK(nagare_config_set(cfg, "flush_interval", "5ms") == NAGARE_OK);
  CHECK(nagare_config_set_error_callback(cfg, on_error, &calls) == NAGARE_OK);
  c = nagare_client_new(cfg);
  CHECK(c != NULL);
  CHECK(emit_seq(c, 0, "refused") == NAGARE_OK);
  CHECK(nagare_flush(c, 300) == NAGARE_ETIMEOUT);
  CHECK(__atomic_load_n(&calls, __ATOMIC_SEQ_CST) >= 1);
  CHECK(nagare_get_stats(c, &st) == NAGARE_OK);
  CHECK(st.buffered == 1 && st.sent == 0 && st.errors >= 1);
  /* the counters after close: the one undelivered event is dropped (no spill file) */
  CHECK(nagare_close_stats(c, 50, &st) == NAGARE_ETIMEOUT);
  CHECK(st.sent == 0 && st.dropped == 1 && st.buffered == 0);
  nagare_config_free(cfg);

  printf("ok\n");
  return 0;
}
