#include "monitor.h"

// Monitor mode: create the container, report, serve until its init exits, record the exit.

static int sync_fd = 3;

static void report(const char *json) {
	write_all_deadline(sync_fd, json, strlen(json), 10000);
	close(sync_fd);
	sync_fd = -1;
}

static void report_error(const char *msg) {
	size_t n = strlen(msg) * 6 + 32;
	char *b = xmalloc(n);
	size_t l = snprintf(b, n, "{\"error\":");
	l += json_quote(b + l, n - l, msg);
	snprintf(b + l, n - l, "}\n");
	report(b);
	free(b);
}

static int fail(const char *msg) {
	report_error(msg);
	diag("monitor: %s", msg);
	return 1;
}

bool restoring(void) { return cfg.restore_image && *cfg.restore_image; }

// read_pid reads the init's pid from the runtime's pid file; 0 with err on error.
pid_t read_pid(const char *what, char *err, size_t errn) {
	char pidfile[PATH_MAX];
	snprintf(pidfile, sizeof pidfile, "%s/%s", cfg.dir, PID_FILE);
	int perr = 0;
	char *b = read_file(pidfile, 4096, &perr);
	if (!b) {
		snprintf(err, errn, "%s %s: read pid file: open %s: %s", base_name(cfg.runtime), what, pidfile, errstr(perr));
		return 0;
	}
	char *end;
	char *t = xstrdup(b);
	trim(t);
	long pid = strtol(t, &end, 10);
	if (!*t || *end || pid <= 0 || pid > INT_MAX) {
		snprintf(err, errn, "%s %s: bad pid file \"%s\"", base_name(cfg.runtime), what, b);
		free(b);
		free(t);
		return 0;
	}
	free(b);
	free(t);
	return (pid_t)pid;
}

// follow_init makes pid the init the monitor waits for, taking its end if the reaper has
// seen it already.
void follow_init(pid_t pid) {
	init_pid = pid;
	for (int i = 0; i < nfinished; i++)
		if (finished[i].pid == pid) {
			int st = finished[i].status;
			memmove(finished + i, finished + i + 1, sizeof finished[0] * (nfinished - i - 1));
			nfinished--;
			init_exited(st);
			break;
		}
}

// create runs `<runtime> create`; the init's pid, or 0 with err.
static pid_t create(char *err, size_t errn) {
	char e2[1024];
	if (restoring() && cfg.terminal) {
		snprintf(err, errn, "a container with a terminal cannot be restored");
		return 0;
	}
	if (cfg.log_path && *cfg.log_path) {
		if (!log_open(cfg.log_dir, cfg.log_path, e2, sizeof e2)) {
			snprintf(err, errn, "open container log %s: %s", cfg.log_path, e2);
			return 0;
		}
	}
	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0) {
		snprintf(err, errn, "open /dev/null: %s", errstr(errno));
		return 0;
	}
	int in = devnull, pin[2] = {-1, -1};
	stdin_once = cfg.stdin_once;
	if (cfg.stdin && !cfg.terminal) {
		if (pipe2(pin, O_CLOEXEC) < 0) {
			snprintf(err, errn, "pipe: %s", errstr(errno));
			return 0;
		}
		in = pin[0];
		stdin_fd = pin[1];
	}
	int console = -1;
	if (cfg.terminal) {
		console = listen_here(CONSOLE_FILE, e2, sizeof e2);
		if (console < 0) {
			snprintf(err, errn, "console socket: %s", e2);
			return 0;
		}
	}
	tail_buf = xmalloc(TAIL_MAX);
	tail_on = true;
	int po[2], pe[2];
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		snprintf(err, errn, "pipe: %s", errstr(errno));
		return 0;
	}
	stream_start(&streams[0], po[0], "stdout", FRAME_STDOUT);
	stream_start(&streams[1], pe[0], "stderr", FRAME_STDERR);
	if (restoring()) {
		// Nothing runs until start, which runs `<runtime> restore` with these as its stdio:
		// CRIU gives the restored processes the runtime's own. Its words stay in the tail.
		start_stdio[0] = po[1];
		start_stdio[1] = pe[1];
		start_stdin = pin[0];
		close(devnull);
		return RESTORE_PENDING;
	}

	char pidfile[PATH_MAX];
	snprintf(pidfile, sizeof pidfile, "%s/%s", cfg.dir, PID_FILE);
	size_t k;
	char **argv = runtime_argv_n(8, &k);
	argv[k++] = "create";
	argv[k++] = "--bundle";
	argv[k++] = cfg.bundle;
	argv[k++] = "--pid-file";
	argv[k++] = pidfile;
	if (console >= 0) {
		argv[k++] = "--console-socket";
		argv[k++] = CONSOLE_FILE;
	}
	argv[k++] = cfg.id;
	const char *se = run_to_end(argv, in, po[1], pe[1], CREATE_TIMEOUT_MS, e2, sizeof e2);
	if (cfg.wait_with_runtime && !se) {
		// A sandboxed subcontainer gets its stdio from `start`.
		start_stdio[0] = po[1];
		start_stdio[1] = pe[1];
		if (pin[0] >= 0)
			start_stdin = pin[0];
	} else {
		close(po[1]);
		close(pe[1]);
		if (pin[0] >= 0)
			close(pin[0]);
	}
	close(devnull);
	if (se) {
		runtime_failed("create", se, err, errn);
		return 0;
	}
	tail_end();
	if (console >= 0) {
		if (cfg.wait_with_runtime) {
			console_fd = console; // runsc hands a subcontainer's terminal over at start
		} else {
			int m = receive_console(console, e2, sizeof e2);
			close(console);
			unlink(CONSOLE_FILE);
			if (m < 0) {
				snprintf(err, errn, "%s create: %s", base_name(cfg.runtime), e2);
				return 0;
			}
			start_console_stream(m);
		}
	}
	return read_pid("create", err, errn);
}

static bool write_exit_file(const char *data) {
	char tmp[PATH_MAX], path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", cfg.dir, EXIT_FILE);
	snprintf(tmp, sizeof tmp, "%s/.%s.tmp%ld", cfg.dir, EXIT_FILE, (long)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		unlink(tmp);
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_EXCL | O_CLOEXEC, 0600);
	}
	if (fd < 0) {
		diag("write exit file: open %s: %s", tmp, errstr(errno));
		return false;
	}
	size_t n = strlen(data);
	bool ok = write(fd, data, n) == (ssize_t)n && fchmod(fd, 0600) == 0 && fsync(fd) == 0;
	int e = errno;
	if (close(fd) < 0 && ok) {
		ok = false;
		e = errno;
	}
	if (!ok || rename(tmp, path) < 0) {
		if (ok)
			e = errno;
		unlink(tmp);
		diag("write exit file: %s", errstr(e));
		return false;
	}
	int dfd = open(cfg.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return true;
}

int run_monitor(const char *cfgpath) {
	reserve_fds(sync_fd, sync_fd); // the report goes nowhere else, whatever we were given
	fcntl(sync_fd, F_SETFD, FD_CLOEXEC);
	int e = 0;
	char *b = read_file(cfgpath, 1 << 20, &e);
	char msg[8192];
	if (!b) {
		snprintf(msg, sizeof msg, "monitor: read config: open %s: %s", cfgpath, errstr(e));
		report_error(msg);
		diag("monitor: read config: open %s: %s", cfgpath, errstr(e));
		return 1;
	}
	const char *perr = json_parse_config(b, &cfg, false);
	free(b);
	if (perr) {
		snprintf(msg, sizeof msg, "monitor: read config: %s", perr);
		report_error(msg);
		diag("%s", msg);
		return 1;
	}
	if (!cfg.id)
		cfg.id = "";
	if (!cfg.dir)
		cfg.dir = "";
	if (!cfg.runtime)
		cfg.runtime = "";
	if (!cfg.bundle)
		cfg.bundle = "";
	snprintf(log_prefix, sizeof log_prefix, "%.12s ", cfg.id);
	if (!setup_loop(false)) {
		snprintf(msg, sizeof msg, "monitor: event loop: %s", errstr(errno));
		return fail(msg + 9);
	}
	// Orphans of the runtime become our children: we wait for the init, reap the rest.
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
		snprintf(msg, sizeof msg, "monitor: set child subreaper: %s", errstr(errno));
		report_error(msg);
		diag("%s", msg);
		return 1;
	}
	if (chdir(cfg.dir) < 0) {
		snprintf(msg, sizeof msg, "monitor: chdir %s: %s", cfg.dir, errstr(errno));
		report_error(msg);
		diag("%s", msg);
		return 1;
	}
	char e2[1024];
	listen_fd = listen_here(SOCKET_FILE, e2, sizeof e2);
	if (listen_fd < 0) {
		snprintf(msg, sizeof msg, "monitor: listen %s: %s", SOCKET_FILE, e2);
		report_error(msg);
		diag("%s", msg);
		return 1;
	}
	listen_update();

	busy = true; // a start that comes during create waits for it
	pid_t pid = create(msg, sizeof msg);
	if (pid == 0) {
		report_error(msg);
		diag("monitor: %s", msg);
		return 1;
	}
	char ok[64];
	if (pid == RESTORE_PENDING) {
		report("{}\n"); // no process until the restore at start
		diag("container %s created, to be restored from %s at start", cfg.id, cfg.restore_image);
	} else {
		snprintf(ok, sizeof ok, "{\"pid\":%d}\n", (int)pid);
		report(ok);
		diag("container %s created, pid %d", cfg.id, (int)pid);
	}
	if (!cfg.wait_with_runtime && pid != RESTORE_PENDING)
		follow_init(pid);
	busy = false;
	serve_pending_starts();
	while (!init_done && !exit_requested)
		loop_once(now_ms() + 10000);
	// What the container wrote before its end is in the pipes now (the reaper may have
	// seen the end first): it goes to the log and to the attach clients before their
	// sessions end. Bounded, should something else hold the pipes and write on.
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 4 && streams[i].open && stream_read(&streams[i]); k++)
			;
	if (init_done) {
		char data[256];
		int l = snprintf(data, sizeof data, "{\"pid\":%d,\"status\":%d,", (int)(cfg.wait_with_runtime ? 0 : init_pid),
				 exit_status);
		if (exit_signal)
			l += snprintf(data + l, sizeof data - l, "\"signal\":%d,", exit_signal);
		snprintf(data + l, sizeof data - l, "\"exited_at\":\"%s\"}", exit_at);
		bool saved = write_exit_file(data);
		diag("container exited with status %d", exit_status);
		char line[260];
		snprintf(line, sizeof line, "%s\n", data);
		notify(line);
		attach_end();
		// Without exit.json a daemon that is not watching now would never learn the exit
		// (it would record 137): serve it to watchers until one takes it, and try the file
		// again each second meanwhile. Not for ever: once the directory is gone (the
		// container was removed) nobody can connect, its socket's name having gone with
		// it, and the file cannot be written; and a run root that stays full or read-only
		// for EXIT_SERVE_MS is not waited out either.
		if (!saved && !exit_taken)
			diag("exit.json not written: serving the exit to the next watcher");
		int64_t give_up = now_ms() + EXIT_SERVE_MS;
		for (int64_t next = now_ms() + 1000; !saved && !exit_taken;) {
			loop_once(next);
			if (exit_taken || now_ms() < next)
				continue;
			saved = write_exit_file(data);
			struct stat st;
			if (!saved && stat(cfg.dir, &st) < 0 && (errno == ENOENT || errno == ENOTDIR)) {
				diag("%s is gone: exit not handed over, nobody can take it: %s", cfg.dir, data);
				break;
			}
			if (!saved && now_ms() >= give_up) {
				diag("exit.json not written and no watcher for %d s: exit not handed over: %s",
				     EXIT_SERVE_MS / 1000, data);
				break;
			}
			next = now_ms() + 1000;
		}
	} else {
		diag("supervision ended without a start");
		notify("{}\n");
	}
	// Connections already made are served in the moment below (a client that connected
	// before the exit expects its answer); closing the listener would reset them.
	if (listening)
		conn_accept();
	listen_close();
	// A moment for the last lines; never wait for EOF (runsc holds the pipes). Then what
	// clients have not taken yet, for a bounded time.
	loop_for(100);
	drain_closing();
	for (int i = 0; i < 3; i++)
		if (streams[i].open)
			stream_lines(&streams[i], true);
	return 0;
}
