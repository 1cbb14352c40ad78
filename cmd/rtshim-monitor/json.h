// A small JSON reader for the monitor's configs (internal/monitor Config and LoggerConfig):
// one flat object of strings, booleans and one string array; other keys and values are
// skipped. And the quoting of one string for the replies the monitor writes.
#ifndef RTSHIM_JSON_H
#define RTSHIM_JSON_H

#include <stdbool.h>
#include <stddef.h>

struct json_config {
	char *id, *dir, *runtime, *bundle, *log_path, *log_dir;
	// exec_fifo: runc's exec FIFO for this container; set, start reads it instead of
	// running `<runtime> start` (fifo_start)
	char *exec_fifo;
	// restore_image, restore_work: a CRIU image to restore the container from at start
	// (`<runtime> restore`), in place of create and start, and CRIU's work directory
	char *restore_image, *restore_work;
	// restore_lsm: the restore's --lsm-profile (TYPE:NAME), the new spec's profile.
	char *restore_lsm;
	char **runtime_args;
	size_t runtime_nargs;
	bool wait_with_runtime, stdin, stdin_once, terminal;
	// logger.json: stdin is the stdin FIFO's path there
	char *stdin_fifo, *stdout_fifo, *stderr_fifo;
};

// json_parse_config fills cfg from the object in s; NULL, or an error text.
const char *json_parse_config(const char *s, struct json_config *cfg, bool logger);

// json_object_int reads key's integer value from the object in s, as Unmarshal into a struct
// with one int field: 0 with *v set; 1 when key is absent or null; -1 on an error.
int json_object_int(const char *s, const char *key, long *v);

// json_quote writes s as a JSON string into out (n bytes, at least 6*len+3) and returns
// its length.
size_t json_quote(char *out, size_t n, const char *s);

#endif
