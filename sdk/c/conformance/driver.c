/* Drives the C library for the conformance suite (protocol:
 * sdk/conformance/README.md): one command per line on stdin, one JSON reply
 * per line on stdout. nagare_close() frees the client, so "stats" after
 * "close" answers {"unavailable": true}. */
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

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int main(void) {
  nagare_client *log = NULL;
  char line[4096], tag[256], v[512];
  long long next_seq = 0; /* one counter: the runner uses one tag per run */
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = 0;
    if (strncmp(line, "configure ", 10) == 0) {
      nagare_config *cfg = nagare_config_new();
      const char *o = line + 10;
      if (json_field(o, "servers", v, sizeof v)) nagare_config_set(cfg, "servers", v);
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
      int rc = nagare_close(log, (uint32_t)atoi(line + 6));
      log = NULL;
      printf("{\"closed\":%s,\"ms\":%lld}\n", rc == NAGARE_OK ? "true" : "false", now_ms() - t0);
    } else if (strcmp(line, "stats") == 0) {
      nagare_stats s;
      /* kept: events in the spill file, at most what was written to it */
      if (log && nagare_get_stats(log, &s) == NAGARE_OK)
        printf("{\"sent\":%llu,\"dropped\":%llu,\"kept\":%llu,\"buffered\":%llu}\n",
               (unsigned long long)s.sent, (unsigned long long)s.dropped,
               (unsigned long long)(s.spilled < s.buffered ? s.spilled : s.buffered),
               (unsigned long long)s.buffered);
      else
        printf("{\"unavailable\":true}\n");
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
