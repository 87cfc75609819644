/* make example && ./target/debug/nagare-c-hello 127.0.0.1:24224 */
#include "nagare.h"
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  nagare_config *cfg = nagare_config_new();
  nagare_config_set(cfg, "servers", argc > 1 ? argv[1] : "127.0.0.1:24224");
  nagare_config_set(cfg, "require_ack", "true");
  nagare_client *log = nagare_client_new(cfg);
  nagare_config_free(cfg);
  if (!log) { fprintf(stderr, "nagare: %s\n", nagare_last_error()); return 1; }
  const char *rec = "{\"message\":\"hello from C\",\"level\":\"info\"}";
  nagare_emit_json(log, "app.c", rec, strlen(rec));
  int rc = nagare_close(log, 5000);
  if (rc != NAGARE_OK) fprintf(stderr, "nagare: %s\n", nagare_last_error());
  return rc == NAGARE_OK ? 0 : 1;
}
