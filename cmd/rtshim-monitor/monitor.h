// The monitor's shared declarations. One thread, one epoll loop (loop.c): the state below
// is global because every part of the program runs in that loop, never concurrently.
// Files by part: util.c (time, diagnostics, allocation, output queues), crilog.c (the
// CRI log), streams.c (the container's output), attach.c (connections, attach sessions,
// the console), proc.c (spawn and reap), loop.c (the event loop), commands.c (the socket's
// commands), monitor_mode.c, logger.c (the two modes) and main.c (state, setup, main).
// docs/monitor-protocol.md states the protocol.
#ifndef RTSHIM_MONITOR_H
#define RTSHIM_MONITOR_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "json.h"

extern char **environ;

#define SOCKET_FILE "monitor.sock"
#define CONSOLE_FILE "console.sock"
#define EXIT_FILE "exit.json"
#define PID_FILE "init.pid"
#define LOG_FILE "monitor.log"
#define LOGGER_CONFIG "logger.json"
#define MAX_LOG_LINE (16 * 1024)
#define MAX_FRAME (1 << 20)
#define MAX_FINISHED 64
#define CREATE_TIMEOUT_MS (4 * 60 * 1000)
#define START_TIMEOUT_MS (60 * 1000)
// How long an exit that exit.json could not hold is served to watchers at most.
#define EXIT_SERVE_MS (10 * 60 * 1000)
#define CMD_READ_MS (10 * 1000)
#define TAIL_MAX (8 << 10)

enum { FRAME_STDIN = 0, FRAME_STDOUT = 1, FRAME_STDERR = 2, FRAME_RESIZE = 3, FRAME_CLOSE_STDIN = 4 };

struct outq {
	char *buf;
	size_t off, len, cap; // buf[off:len] waits
};

enum { OUTQ_OK = 0, OUTQ_ERR = -1, OUTQ_FULL = -2 };

struct stream {
	int fd;
	const char *name;
	int kind;
	char *buf; // MAX_LOG_LINE bytes: a line longer than that is cut into P entries
	size_t len;
	bool waited; // logger mode: its end ends the logger
	bool open;
};

// MAX_CONNS bounds the connections served at once (the daemon holds a watch and opens a
// few more): past it, new ones wait in the listen backlog instead of taking fds.
#define MAX_CONNS 128
// MAX_ATTACH bounds the attach sessions among them (monitor.MaxAttach): past it an attach is
// refused with an error frame, so that sessions never take the connections the daemon's
// control requests (reopen, watch, start, exit) need.
#define MAX_ATTACH 32
#define FRAME_ERROR 5

enum conn_state { C_CMD, C_WATCH, C_ATTACH, C_BUSY, C_CLOSING };

struct conn {
	int fd;
	enum conn_state state;
	int64_t deadline; // C_CMD: the command line's; C_CLOSING: the reply's
	char *in;
	size_t len, cap;
	struct outq out;
	uint32_t events;   // what epoll watches for it now (0: not registered)
	bool paused;       // a stdin frame waits for the container to read what came before
	bool in_eof;       // the client sent all it will (frames may still wait in `in`)
	bool out_dead;     // a write to the client failed: its output is discarded
	bool exit_reply;   // C_CLOSING: what it sends is the exit line
	struct conn *next; // all connections
	struct conn *qnext; // C_BUSY: the next start waiting behind this one
};

// END_FLUSH_MS bounds the time output still queued for a client is written once the
// container has exited (attach_end, drain_closing): a client that keeps up gets it all.
#define END_FLUSH_MS 1000

struct cmd {
	pid_t pid;
	int status;
	bool done;
	int64_t kill_at; // 0: no timeout
	int outfd;       // read end of its output, or -1
	char *out;
	size_t outlen;
	bool out_eof;
	int64_t out_until; // after the end: how long to wait for the output's EOF
	struct cmd *next;
	void (*on_done)(struct cmd *); // async commands (runtime wait)
};

struct exited {
	pid_t pid;
	int status;
};

// util.c
extern char log_prefix[64];
extern int epfd;
int64_t now_ms(void);
size_t rfc3339nano(char *out, size_t n);
void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *errstr(int e);
const char *signame(int sig);
const char *base_name(const char *p);
void *xmalloc(size_t n);
void *xrealloc(void *p, size_t n);
void *xcalloc(size_t n, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
bool ep_add(int fd, uint32_t events, void *ptr);
void ep_del(int fd);
void set_nonblock(int fd, bool on);
bool write_all_deadline(int fd, const void *buf, size_t n, int ms);
void iov_skip(struct iovec **v, int *k, size_t w);
size_t outq_pending(const struct outq *q);
void outq_clear(struct outq *q);
int outq_flush(struct outq *q, int fd);
int outq_put(struct outq *q, int fd, const struct iovec *iov, int n, size_t max);
char *read_file(const char *path, size_t max, int *err);

// crilog.c
extern char *log_dir, *log_rel;
bool log_open(const char *dir, const char *path, char *err, size_t errn);
bool log_reopen(char *err, size_t errn);
void log_entry(const char *stream, char tag, const char *text, size_t n);

// streams.c
extern struct stream streams[3];
extern char *tail_buf;
extern size_t tail_len;
extern bool tail_on;
void stream_lines(struct stream *s, bool eof);
void stream_start(struct stream *s, int fd, const char *name, int kind);
bool stream_read(struct stream *s);

// attach.c
extern struct conn *conns;
extern int nconns;
extern int stdin_fd;
extern int master_fd;
extern bool stdin_once, attach_closed;
extern bool exit_taken;
extern int stdin_q_fd, tag_stdin;
void conn_watch(struct conn *c);
void conn_free(struct conn *c);
void conn_send_close(struct conn *c, const char *p, size_t n);
void attach_broadcast(int kind, const char *p, size_t n);
void attach_end(void);
bool closing_left(void);
void stdin_flush(void);
bool attach_frames(struct conn *c);
int receive_console(int ln, char *err, size_t errn);

// proc.c
extern struct cmd *cmds;
extern struct exited finished[MAX_FINISHED];
extern int nfinished;
extern pid_t init_pid;
extern bool init_done;
void reap_all(void);
struct cmd *spawn(char **argv, int in, int out, int errfd, const char *dir, int timeout_ms, char *err,
			 size_t errn);
void cmd_free(struct cmd *c);
void cmd_read(struct cmd *c);
const char *status_err(int st);
// run_to_end spawns argv (freed here) in the bundle, waits for the process's end only (what
// it leaves holding its output pipes is not waited for) and returns NULL, or why it failed
// (in err when it could not be spawned).
const char *run_to_end(char **argv, int in, int out, int errfd, int timeout_ms, char *err, size_t errn);

// loop.c
extern int sigfd, listen_fd;
extern bool terminated;
extern int tag_sig, tag_listen;
extern bool listening;
extern int64_t accept_resume;
void listen_update(void);
void loop_once(int64_t until);
int run_cmd(struct cmd *c);
void loop_for(int ms);
void drain_closing(void);

// commands.c
void notify(const char *line);
void trim(char *s);
void init_exited(int st);
// RESTORE_PENDING: create's answer for a container restored at start (cfg.restore_image).
#define RESTORE_PENDING ((pid_t)-1)
bool restoring(void);
pid_t read_pid(const char *what, char *err, size_t errn);
char **runtime_argv_n(size_t extra, size_t *k);
void runtime_failed(const char *what, const char *se, char *err, size_t errn);
void tail_end(void);
void follow_init(pid_t pid);
void start_console_stream(int fd);
void serve_pending_starts(void);
void conn_accept(void);
void conn_event(struct conn *c, uint32_t events);

// monitor_mode.c
int run_monitor(const char *cfgpath);

// logger.c
int run_logger(const char *dir);

// main.c
extern struct json_config cfg;
extern bool logger_mode, started, starting, busy, exit_requested, exit_ok;
extern int exit_status, exit_signal;
extern char exit_at[64];
extern char *exit_line;
extern int start_stdio[2], start_stdin, console_fd;
extern struct conn *pending_first, *pending_last;
void reserve_fds(int lo, int hi);
bool setup_loop(bool catch_term);
void listen_close(void);
int listen_here(const char *name, char *err, size_t errn);

#endif
