#include "monitor.h"

// The commands of monitor.sock: start, watch, reopen, exit and attach, one per connection.

static void reply(struct conn *c, const char *err) {
	char buf[4096];
	int l;
	if (err) {
		l = snprintf(buf, sizeof buf - 1, "error ");
		for (const char *p = err; *p && l < (int)sizeof buf - 2; p++) {
			if (*p == '\n') {
				int k = snprintf(buf + l, sizeof buf - 2 - l, " | ");
				l += k;
			} else
				buf[l++] = *p;
		}
		if (l > (int)sizeof buf - 2)
			l = sizeof buf - 2;
		buf[l++] = '\n';
	} else {
		l = snprintf(buf, sizeof buf, "ok\n");
	}
	conn_send_close(c, buf, l);
}

void notify(const char *line) {
	free(exit_line);
	exit_line = xstrdup(line);
	for (struct conn *c = conns, *nx; c; c = nx) {
		nx = c->next;
		if (c->state == C_WATCH) {
			c->exit_reply = line[0] == '{' && line[1] != '}';
			conn_send_close(c, line, strlen(line));
		}
	}
}

// runtime_argv_n is a NULL-ended argv of the runtime and its global flags with room for
// extra more arguments, the next at *k.
char **runtime_argv_n(size_t extra, size_t *k) {
	char **v = xcalloc(cfg.runtime_nargs + extra + 2, sizeof *v);
	*k = 0;
	v[(*k)++] = cfg.runtime;
	for (size_t i = 0; i < cfg.runtime_nargs; i++)
		v[(*k)++] = cfg.runtime_args[i];
	return v;
}

// runtime_failed writes "<runtime> <what>: <se>: <its last words>" to err, once the
// copiers have taken those words into the tail.
void runtime_failed(const char *what, const char *se, char *err, size_t errn) {
	loop_for(20);
	char *t = xstrndup(tail_buf ? tail_buf : "", tail_buf ? tail_len : 0);
	trim(t);
	snprintf(err, errn, "%s %s: %s: %s", base_name(cfg.runtime), what, se, t);
	free(t);
}

// tail_end stops keeping the runtime's last words.
void tail_end(void) {
	tail_on = false;
	free(tail_buf);
	tail_buf = NULL;
	tail_len = 0;
}

static char **runtime_argv(const char *a1, const char *a2, const char *a3) {
	size_t k;
	char **v = runtime_argv_n(3, &k);
	if (a1)
		v[k++] = (char *)a1;
	if (a2)
		v[k++] = (char *)a2;
	if (a3)
		v[k++] = (char *)a3;
	return v;
}

// runtime_output runs `<runtime> <args…> a1 a2` in "/" with its output to a pipe.
static struct cmd *runtime_output(const char *a1, const char *a2, int timeout_ms, char *err, size_t errn) {
	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int p[2];
	if (devnull < 0 || pipe2(p, O_CLOEXEC) < 0) {
		snprintf(err, errn, "%s", errstr(errno));
		if (devnull >= 0)
			close(devnull);
		return NULL;
	}
	char **argv = runtime_argv(a1, a2, NULL);
	struct cmd *c = spawn(argv, devnull, p[1], p[1], "/", timeout_ms, err, errn);
	free(argv);
	close(devnull);
	close(p[1]);
	if (!c) {
		close(p[0]);
		return NULL;
	}
	c->outfd = p[0];
	set_nonblock(p[0], true);
	ep_add(p[0], EPOLLIN, c);
	return c;
}

void trim(char *s) {
	if (!s)
		return;
	size_t n = strlen(s);
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = 0;
	size_t k = 0;
	while (s[k] == ' ' || s[k] == '\n' || s[k] == '\t' || s[k] == '\r')
		k++;
	memmove(s, s + k, n - k + 1);
}

static void record_exit(pid_t pid, int status, int sig) {
	if (exit_requested || init_done)
		return;
	init_done = true;
	exit_ok = true;
	exit_status = status;
	exit_signal = sig;
	rfc3339nano(exit_at, sizeof exit_at);
	(void)pid;
}

void init_exited(int st) {
	if (WIFEXITED(st))
		record_exit(init_pid, WEXITSTATUS(st), 0);
	else if (WIFSIGNALED(st))
		record_exit(init_pid, 128 + WTERMSIG(st), WTERMSIG(st));
	else
		record_exit(init_pid, 255, 0);
}

static void wait_done(struct cmd *c) {
	int status = 255;
	const char *e = status_err(c->status);
	trim(c->out);
	long v = 0;
	if (!e && c->out && json_object_int(c->out, "exitStatus", &v) >= 0)
		status = (int)v;
	else
		diag("%s wait: %s: %s", base_name(cfg.runtime), e ? e : "bad output", c->out ? c->out : "");
	record_exit(0, status, 0);
}

void start_console_stream(int fd) {
	master_fd = stdin_fd = fd;
	// A terminal has one stream: the container's output, logged as stdout.
	stream_start(&streams[2], fcntl(fd, F_DUPFD_CLOEXEC, 3), "stdout", FRAME_STDOUT);
}

static int tag_fifo; // the exec FIFO in epoll: it only wakes the loop, fifo_start reads

// bundle_has_poststart reports whether the bundle's config.json, as the runtime read it (a
// runtime_path wrapper may have added hooks in place), may hold poststart hooks, which
// runc from 1.2 runs in its start. A mention anywhere counts, as does a spec that cannot be
// read whole: the start then runs `<runtime> start`.
static bool bundle_has_poststart(void) {
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof path, "%s/config.json", cfg.bundle);
	if (stat(path, &st) < 0 || st.st_size > (16 << 20))
		return true;
	int e = 0;
	char *b = read_file(path, (size_t)st.st_size + 2, &e);
	if (!b)
		return true;
	bool has = strstr(b, "\"poststart\"") != NULL;
	free(b);
	return has;
}

// fifo_start does what `runc start` does (libcontainer's Container.exec): runc init waits
// on the exec FIFO before it execs the container's process; reading the byte it writes
// lets it go, and removing the FIFO is how runc then tells a running container from a
// created one. It saves starting runc, a Go binary: ~10 ms of wall and CPU per container
// (docs/performance.md). It returns once runc init has closed its end (at its exec in runc
// 1.1, whose start waits for that too). 1: started; 0: the FIFO is not there, the bundle
// has poststart hooks, or the init ended before it wrote (the caller runs `<runtime>
// start`, which says why); -1: an error in err.
static int fifo_start(char *err, size_t errn) {
	if (bundle_has_poststart())
		return 0;
	int fd = open(cfg.exec_fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd < 0)
		return 0;
	if (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode) || !ep_add(fd, EPOLLIN, &tag_fifo)) {
		close(fd);
		return 0;
	}
	int64_t end = now_ms() + START_TIMEOUT_MS;
	bool got = false;
	int r;
	for (;;) {
		char b[16];
		ssize_t n = read(fd, b, sizeof b);
		if (n > 0) {
			got = true;
			continue;
		}
		if (n == 0 && got) { // the init exec'd (or ended after it wrote, as runc allows)
			r = 1;
			break;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			r = got ? 1 : 0; // the byte was taken: the init goes on
			break;
		}
		// No writer yet (the init opens its end once a reader has), or no byte yet.
		if (!got && (init_done || init_pid <= 0 || kill(init_pid, 0) < 0)) {
			r = 0;
			break;
		}
		int64_t t = now_ms();
		if (t >= end) {
			snprintf(err, errn, "timed out after %d ms waiting for the container's init at %s", START_TIMEOUT_MS,
				 cfg.exec_fifo);
			r = -1;
			break;
		}
		loop_once(t + 100 < end ? t + 100 : end);
	}
	ep_del(fd);
	close(fd);
	// Once the byte is taken the init runs on, even after a timeout: runc must not go on
	// calling the container created. A FIFO that stays is an error, as in runc's start.
	if (got && unlink(cfg.exec_fifo) < 0 && errno != ENOENT && r == 1) {
		snprintf(err, errn, "remove %s: %s", cfg.exec_fifo, errstr(errno));
		r = -1;
	}
	return r;
}

// do_restore runs `<runtime> restore --detach` from cfg.restore_image with the pipes
// create made as its stdio (CRIU hands them to the restored processes), and follows the
// restored init, which becomes our child when the runtime exits (we are its subreaper).
// NULL on success, or the error text with the runtime's words.
static const char *do_restore(void) {
	static char err[8192];
	char pidfile[PATH_MAX], e2[1024];
	if (start_stdio[0] < 0)
		return "its restore failed already: a failed restore is not tried again (remove the container)";
	snprintf(pidfile, sizeof pidfile, "%s/%s", cfg.dir, PID_FILE);
	int in = start_stdin >= 0 ? start_stdin : open("/dev/null", O_RDONLY | O_CLOEXEC);
	size_t k;
	char **argv = runtime_argv_n(13, &k);
	argv[k++] = "restore";
	argv[k++] = "--detach";
	argv[k++] = "--bundle";
	argv[k++] = cfg.bundle;
	argv[k++] = "--pid-file";
	argv[k++] = pidfile;
	argv[k++] = "--image-path";
	argv[k++] = cfg.restore_image;
	argv[k++] = "--work-path";
	argv[k++] = cfg.restore_work && *cfg.restore_work ? cfg.restore_work : cfg.restore_image;
	// The new spec's LSM profile, not the one CRIU recorded in the image.
	if (cfg.restore_lsm && *cfg.restore_lsm) {
		argv[k++] = "--lsm-profile";
		argv[k++] = cfg.restore_lsm;
	}
	argv[k++] = cfg.id;
	// The restored processes hold the pipes: the restore's end is what is waited for.
	const char *se = run_to_end(argv, in, start_stdio[0], start_stdio[1], CREATE_TIMEOUT_MS, e2, sizeof e2);
	if (in >= 0)
		close(in);
	start_stdin = -1;
	close(start_stdio[0]);
	close(start_stdio[1]);
	start_stdio[0] = start_stdio[1] = -1;
	if (se) {
		runtime_failed("restore", se, err, sizeof err);
		return err;
	}
	tail_end();
	pid_t pid = read_pid("restore", e2, sizeof e2);
	if (pid == 0) {
		snprintf(err, sizeof err, "%s", e2);
		return err;
	}
	follow_init(pid);
	diag("container %s restored from %s, pid %d", cfg.id, cfg.restore_image, (int)pid);
	return NULL;
}

// do_start runs `<runtime> start` (or its work, fifo_start), or the restore; NULL on
// success, or the error text.
static const char *do_start(void) {
	static char err[8192];
	if (started)
		return NULL;
	if (restoring()) {
		const char *e = do_restore();
		if (e)
			return e;
	} else if (start_stdio[0] >= 0) {
		// runsc hands a subcontainer the start command's own stdio.
		int in = start_stdin >= 0 ? start_stdin : open("/dev/null", O_RDONLY | O_CLOEXEC);
		char **argv = runtime_argv("start", cfg.id, NULL);
		char e2[1024];
		struct cmd *c = spawn(argv, in, start_stdio[0], start_stdio[1], cfg.bundle, START_TIMEOUT_MS, e2, sizeof e2);
		free(argv);
		close(in);
		start_stdin = -1;
		close(start_stdio[0]);
		close(start_stdio[1]);
		start_stdio[0] = start_stdio[1] = -1;
		if (!c) {
			snprintf(err, sizeof err, "%s start: %s: ", base_name(cfg.runtime), e2);
			return err;
		}
		int st = run_cmd(c);
		cmd_free(c);
		const char *se = status_err(st);
		if (se) {
			snprintf(err, sizeof err, "%s start: %s: ", base_name(cfg.runtime), se);
			return err;
		}
	} else {
		char e2[1024];
		int f = cfg.exec_fifo && *cfg.exec_fifo ? fifo_start(e2, sizeof e2) : 0;
		if (f < 0) {
			snprintf(err, sizeof err, "%s start: %s", base_name(cfg.runtime), e2);
			return err;
		}
		if (f == 0) {
			struct cmd *c = runtime_output("start", cfg.id, START_TIMEOUT_MS, e2, sizeof e2);
			if (!c) {
				snprintf(err, sizeof err, "%s start: %s: ", base_name(cfg.runtime), e2);
				return err;
			}
			int st = run_cmd(c);
			trim(c->out);
			const char *se = status_err(st);
			if (se) {
				snprintf(err, sizeof err, "%s start: %s: %s", base_name(cfg.runtime), se, c->out ? c->out : "");
				cmd_free(c);
				return err;
			}
			cmd_free(c);
		}
	}
	if (console_fd >= 0) {
		char e2[1024];
		int m = receive_console(console_fd, e2, sizeof e2);
		close(console_fd);
		console_fd = -1;
		unlink(CONSOLE_FILE);
		if (m < 0) {
			snprintf(err, sizeof err, "%s start: %s", base_name(cfg.runtime), e2);
			return err;
		}
		start_console_stream(m);
	}
	started = true;
	if (cfg.wait_with_runtime) {
		char e2[1024];
		struct cmd *c = runtime_output("wait", cfg.id, 0, e2, sizeof e2);
		if (!c) {
			diag("%s wait: %s", base_name(cfg.runtime), e2);
			record_exit(0, 255, 0);
		} else {
			c->on_done = wait_done;
		}
	}
	return NULL;
}

static void handle_start(struct conn *c) {
	c->state = C_BUSY;
	conn_watch(c);
	if (busy) {
		c->qnext = NULL;
		if (pending_last)
			pending_last->qnext = c;
		else
			pending_first = c;
		pending_last = c;
		return;
	}
	busy = starting = true;
	const char *e = do_start();
	busy = starting = false;
	reply(c, e);
	serve_pending_starts();
}

void serve_pending_starts(void) {
	while (pending_first && !busy) {
		struct conn *c = pending_first;
		pending_first = c->qnext;
		if (!pending_first)
			pending_last = NULL;
		handle_start(c);
	}
}

static void handle_command(struct conn *c, const char *cmd) {
	if (logger_mode && strcmp(cmd, "attach") != 0 && strcmp(cmd, "reopen") != 0) {
		char e[512];
		snprintf(e, sizeof e, "command \"%.400s\" is not served in logger mode", cmd);
		reply(c, e);
		return;
	}
	if (strcmp(cmd, "watch") == 0) {
		if (exit_line) {
			c->exit_reply = exit_line[0] == '{' && exit_line[1] != '}';
			conn_send_close(c, exit_line, strlen(exit_line));
			return;
		}
		c->state = C_WATCH;
		c->len = 0;
		conn_watch(c);
	} else if (strcmp(cmd, "start") == 0) {
		handle_start(c);
	} else if (strcmp(cmd, "attach") == 0) {
		if (attach_closed) {
			conn_free(c);
			return;
		}
		int sessions = 0;
		for (struct conn *o = conns; o; o = o->next)
			sessions += o->state == C_ATTACH;
		if (sessions >= MAX_ATTACH) {
			char f[64];
			int n = snprintf(f + 5, sizeof f - 5, "too many attach sessions (%d)", MAX_ATTACH);
			f[0] = FRAME_ERROR, f[1] = 0, f[2] = 0, f[3] = 0, f[4] = (char)n;
			conn_send_close(c, f, 5 + (size_t)n);
			return;
		}
		c->state = C_ATTACH;
		if (!attach_frames(c))
			conn_free(c);
		else
			conn_watch(c);
	} else if (strcmp(cmd, "reopen") == 0) {
		if (!log_rel) {
			reply(c, "container has no log");
			return;
		}
		char e[1024];
		reply(c, log_reopen(e, sizeof e) ? NULL : e);
	} else if (strcmp(cmd, "exit") == 0) {
		if (started || starting) {
			reply(c, "container was started; it ends when its process does");
			return;
		}
		exit_requested = true;
		reply(c, NULL);
	} else {
		char e[512];
		snprintf(e, sizeof e, "unknown command \"%.400s\"", cmd);
		reply(c, e);
	}
}

void conn_accept(void) {
	while (nconns < MAX_CONNS) {
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				diag("accept: %s; accepting again in 100ms", errstr(errno));
				accept_resume = now_ms() + 100;
			}
			break; // EAGAIN, or a connection that went away before it was taken
		}
		struct conn *c = xcalloc(1, sizeof *c);
		c->fd = fd;
		c->state = C_CMD;
		c->deadline = now_ms() + CMD_READ_MS;
		c->next = conns;
		conns = c;
		nconns++;
		conn_watch(c);
	}
	listen_update();
}

static void conn_read(struct conn *c);

void conn_event(struct conn *c, uint32_t events) {
	if (outq_pending(&c->out) > 0 && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
		if (outq_flush(&c->out, c->fd) != OUTQ_OK) {
			if (c->state != C_ATTACH) {
				conn_free(c);
				return;
			}
			c->out_dead = true; // frames it sent are still served
			outq_clear(&c->out);
		}
		if (c->state == C_CLOSING && outq_pending(&c->out) == 0) {
			if (c->exit_reply)
				exit_taken = true;
			conn_free(c);
			return;
		}
		conn_watch(c);
	}
	if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) && (c->events & EPOLLIN))
		conn_read(c);
}

static void conn_read(struct conn *c) {
	for (;;) {
		if (c->cap - c->len < 4096) {
			size_t want = c->cap ? c->cap * 2 : 4096;
			if (c->state == C_ATTACH) {
				size_t need = c->len >= 5 ? 5 + ((size_t)(unsigned char)c->in[1] << 24 |
								 (size_t)(unsigned char)c->in[2] << 16 |
								 (size_t)(unsigned char)c->in[3] << 8 | (unsigned char)c->in[4])
							  : 4096;
				if (need > want)
					want = need + 4096;
			}
			if (c->state != C_ATTACH && c->cap >= 64 * 1024) {
				conn_free(c); // a command line that never ends
				return;
			}
			if (want > MAX_FRAME + 4096 + 5)
				want = MAX_FRAME + 4096 + 5;
			if (want > c->cap) {
				c->in = xrealloc(c->in, want);
				c->cap = want;
			}
		}
		if (c->len == c->cap) {
			// Full, which only a paused session's buffer can be: read on once it runs.
			conn_watch(c);
			return;
		}
		ssize_t r = read(c->fd, c->in + c->len, c->cap - c->len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		if (r <= 0) {
			// The client is done sending: a session whose frames wait for stdin ends
			// once they are handled.
			if (c->state == C_ATTACH && c->paused && r == 0) {
				c->in_eof = true;
				conn_watch(c);
				return;
			}
			conn_free(c);
			return;
		}
		if (c->state == C_WATCH)
			continue; // nothing more is read from a watcher
		c->len += r;
		if (c->state == C_CMD) {
			char *nl = memchr(c->in, '\n', c->len);
			if (!nl)
				continue;
			size_t ll = nl - c->in;
			char *cmd = xstrndup(c->in, ll);
			memmove(c->in, nl + 1, c->len - ll - 1);
			c->len -= ll + 1;
			trim(cmd);
			handle_command(c, cmd);
			free(cmd);
			return; // c may be gone
		}
		if (c->state == C_ATTACH) {
			if (!attach_frames(c)) {
				conn_free(c);
				return;
			}
			if (c->paused) {
				conn_watch(c); // no more reading until the container takes its stdin
				return;
			}
		}
	}
}
