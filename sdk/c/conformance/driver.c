/* Drives the C library for the conformance suite (protocol:
 * sdk/conformance/README.md): one command per line on stdin, one JSON reply
 * per line on stdout. "close" uses nagare_close_stats(), which frees the
 * client and gives its last counters: "stats" after "close" answers them. */
#include "nagare.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The value of "key": a number or the first string of a list, as text. */
static int json_field(const char *json, const char *key, char *out, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  const char *p = strstr(json, pat);
  if (!p) return 0;
  p += strlen(pat);
  p += strspn(p, " :[");
  if (*p == '"') p++;
  size_t n = strcspn(p, "\",]} ");
  if (n == 0 || n >= cap) return 0;
  memcpy(out, p, n);
  out[n] = 0;
  return 1;
}

/* The strings of the list "key": [...], joined with commas. */
static int json_list(const char *json, const char *key, char *out, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  const char *p = strstr(json, pat);
  if (!p || !(p = strchr(p, '['))) return 0;
  const char *end = strchr(p, ']');
  size_t n = 0;
  while (end && (p = strchr(p, '"')) && p < end) {
    const char *q = strchr(p + 1, '"');
    if (!q || n + (size_t)(q - p) + 1 >= cap) return 0;
    if (n) out[n++] = ',';
    memcpy(out + n, p + 1, (size_t)(q - p - 1));
    n += (size_t)(q - p - 1);
    p = q + 1;
  }
  out[n] = 0;
  return n > 0;
}

/* Connection attempts refused (the runner waits on it, not on sleeps). */
static volatile unsigned long long connect_failures;

static void on_error(int code, const char *message, void *user_data) {
  (void)code;
  (void)user_data;
  if (strstr(message, "refused")) __atomic_add_fetch(&connect_failures, 1, __ATOMIC_RELAXED);
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void print_stats(const nagare_stats *s, unsigned long long kept) {
  printf("{\"sent\":%llu,\"dropped\":%llu,\"kept\":%llu,\"buffered\":%llu,"
         "\"connect_failures\":%llu}\n",
         (unsigned long long)s->sent, (unsigned long long)s->dropped, kept,
         (unsigned long long)s->buffered,
         __atomic_load_n(&connect_failures, __ATOMIC_RELAXED));
}

int main(void) {
  nagare_client *log = NULL;
  nagare_stats after_close; /* nagare_close_stats() frees the client: its last counters */
  int closed = 0;
  char line[4096], tag[256], v[512];
  long long next_seq = 0; /* one counter: the runner uses one tag per run */
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = 0;
    if (strncmp(line, "configure ", 10) == 0) {
      nagare_config *cfg = nagare_config_new();
      const char *o = line + 10;
      if (json_list(o, "servers", v, sizeof v)) nagare_config_set(cfg, "servers", v);
      if (json_field(o, "buffer_bytes", v, sizeof v)) nagare_config_set(cfg, "buffer_limit", v);
      if (json_field(o, "overflow", v, sizeof v)) nagare_config_set(cfg, "overflow", v);
      if (json_field(o, "tls_ca", v, sizeof v)) {
        nagare_config_set(cfg, "tls", "true");
        nagare_config_set(cfg, "tls_ca_file", v);
      }
      nagare_config_set_error_callback(cfg, on_error, NULL);
      if (json_field(o, "spill_path", v, sizeof v)) nagare_config_set(cfg, "spill_path", v);
      if (json_field(o, "require_ack", v, sizeof v)) nagare_config_set(cfg, "require_ack", v);
      if (json_field(o, "backoff_base_ms", v, sizeof v)) {
        strcat(v, "ms");
        nagare_config_set(cfg, "backoff_base", v);
      }
      if (json_field(o, "backoff_max_ms", v, sizeof v)) {
        strcat(v, "ms");
        nagare_config_set(cfg, "backoff_max", v);
      }
      log = nagare_client_new(cfg);
      nagare_config_free(cfg);
      if (log) printf("{\"ok\":true}\n");
      else printf("{\"error\":\"configure: %s\"}\n", nagare_last_error());
    } else if (strncmp(line, "emit ", 5) == 0 && log) {
      long long n = 0, accepted = 0;
      if (sscanf(line + 5, "%255s %lld", tag, &n) != 2) n = 0;
      for (long long i = 0; i < n; i++) {
        char rec[64];
        int len = snprintf(rec, sizeof rec, "{\"seq\":%lld}", next_seq++);
        if (nagare_emit_json(log, tag, rec, (size_t)len) == NAGARE_OK) accepted++;
      }
      printf("{\"accepted\":%lld}\n", accepted);
    } else if (strncmp(line, "close ", 6) == 0 && log) {
      long long t0 = now_ms();
      int rc = nagare_close_stats(log, (uint32_t)atoi(line + 6), &after_close);
      log = NULL;
      closed = 1;
      printf("{\"closed\":%s,\"ms\":%lld}\n", rc == NAGARE_OK ? "true" : "false", now_ms() - t0);
    } else if (strcmp(line, "stats") == 0) {
      nagare_stats s;
      /* kept: events in the spill file (fsync'd), at most what is buffered;
       * after close, buffered is what the file keeps */
      if (closed)
        print_stats(&after_close, after_close.buffered);
      else if (log && nagare_get_stats(log, &s) == NAGARE_OK)
        print_stats(&s, s.spilled < s.buffered ? s.spilled : s.buffered);
      else
        printf("{\"error\":\"stats before configure\"}\n");
    } else if (strcmp(line, "quit") == 0) {
      break;
    } else {
      printf("{\"error\":\"unknown or out-of-order command\"}\n");
    }
    fflush(stdout);
  }
  if (log) nagare_close(log, 0);
  return 0;
}
