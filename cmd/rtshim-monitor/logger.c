#include "monitor.h"

// Logger mode: a shim v2 container's output into the CRI log, and its attach sessions.

int run_logger(const char *dir) {
	// The ways in use fds 3 to 5 (a shim's stdout, stderr and ready fd; or the daemon's
	// ready fd 3 alone). Hold the free ones first, so that nothing opened here (the epoll
	// fd, the signalfd) lands where the fallback of an unreadable config looks.
	reserve_fds(3, 5);
	// Before anything can say we are ready: a SIGTERM right after must drain, not kill us.
	if (!setup_loop(true))
		return 1;
	logger_mode = true;
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, LOGGER_CONFIG);
	int e = 0;
	char *b = read_file(path, 1 << 20, &e);
	const char *cfgErr = NULL;
	char cerr[PATH_MAX + 128];
	if (!b) {
		snprintf(cerr, sizeof cerr, "open %s: %s", path, errstr(e));
		cfgErr = cerr;
	} else {
		cfgErr = json_parse_config(b, &cfg, true);
		free(b);
	}
	int ready = cfg.stdout_fifo && *cfg.stdout_fifo ? 3 : 5;
	snprintf(path, sizeof path, "%s/%s", dir, LOG_FILE);
	int lf = open(path, O_CREAT | O_WRONLY | O_APPEND | O_CLOEXEC, 0600);
	if (lf >= 0) {
		dup2(lf, 2);
		close(lf);
	}
	const char *id = getenv("CONTAINER_ID");
	snprintf(log_prefix, sizeof log_prefix, "%.12s logger ", id ? id : "");
	// Whatever fails here, keep reading the output: a logger that went away would leave
	// the container's writes failing.
	if (cfgErr)
		diag("read config: %s; the output is discarded", cfgErr);
	char err[2048];
	if (cfg.log_path && *cfg.log_path && !log_open(cfg.log_dir, cfg.log_path, err, sizeof err))
		diag("open container log %s: %s; the output is discarded", cfg.log_path, err);
	if (cfg.stdin_fifo && *cfg.stdin_fifo) {
		// O_RDWR: opening a FIFO for writing alone blocks until a reader is there.
		int fd = open(cfg.stdin_fifo, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			diag("open stdin %s: %s", cfg.stdin_fifo, errstr(errno));
		else {
			stdin_fd = fd;
			stdin_once = cfg.stdin_once;
		}
	}
	if (chdir(dir) < 0) {
		diag("attach unavailable: chdir %s: %s", dir, errstr(errno));
	} else {
		listen_fd = listen_here(SOCKET_FILE, err, sizeof err);
		if (listen_fd < 0)
			diag("attach unavailable: listen %s: %s", SOCKET_FILE, err);
		else
			listen_update();
	}
	bool fifo_mode = cfg.stdout_fifo && *cfg.stdout_fifo;
	for (int i = 0; i < 2; i++) {
		const char *name = i == 0 ? "stdout" : "stderr";
		int kind = i == 0 ? FRAME_STDOUT : FRAME_STDERR;
		char *fifo = i == 0 ? cfg.stdout_fifo : cfg.stderr_fifo;
		if (fifo_mode && !(fifo && *fifo))
			continue; // FIFO mode without this stream (a terminal has no stderr)
		streams[i].waited = !cfg.terminal || i == 0;
		if (fifo_mode) {
			// A FIFO goes into epoll at once, opened O_RDONLY|O_NONBLOCK: the open does not
			// wait for the writer (the shim), and Linux reports no EPOLLHUP on such a reader
			// until a writer has come (fifo_open suppresses it), so nothing wakes the loop
			// before the shim's first write, and its close is the stream's end, as the Go
			// logger's blocking open and read see it. Keeping a write end open ourselves
			// (or O_RDWR) would hide that end. A FIFO that cannot be opened is not waited
			// for (it never opens).
			int fd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
			if (fd < 0)
				diag("open %s: %s", fifo, errstr(errno));
			else
				stream_start(&streams[i], fd, name, kind);
		} else {
			fcntl(3 + i, F_SETFD, FD_CLOEXEC);
			stream_start(&streams[i], 3 + i, name, kind);
			// What cannot be read (the write end that is the daemon's ready fd, when an
			// unreadable config sent us here) ends now, as Go's first read ends it.
			if (streams[i].open)
				stream_read(&streams[i]);
		}
	}
	close(ready);
	diag("logging to \"%s\"", cfg.log_path ? cfg.log_path : "");
	int64_t term_at = 0;
	for (;;) {
		int open_waited = 0;
		for (int i = 0; i < 2; i++)
			if (streams[i].waited && streams[i].open)
				open_waited++;
		if (open_waited == 0)
			break;
		if (terminated && term_at == 0)
			term_at = now_ms() + 2000;
		if (term_at && now_ms() >= term_at) {
			diag("terminated: the output did not end within 2s");
			break;
		}
		loop_once(term_at ? term_at : now_ms() + 10000);
	}
	diag("output ended");
	attach_end();
	listen_close();
	drain_closing();
	if (stdin_fd >= 0)
		close(stdin_fd);
	return 0;
}
