#include "monitor.h"

// The CRI log: the log file opened below the pod's log directory without following a
// symlink, and its entries (docs/monitor-protocol.md).

char *log_dir, *log_rel; // log_rel set: a log is configured and was accepted
static int log_fd = -1;

// path_clean is Go's filepath.Clean: the shortest lexically equal path (malloc'd).
static char *path_clean(const char *p) {
	size_t n = strlen(p);
	bool abs = p[0] == '/';
	char *out = xmalloc(n + 2);
	size_t o = 0;
	size_t *starts = xmalloc(sizeof(size_t) * (n / 2 + 2)); // where each kept element begins
	size_t depth = 0, dotdots = 0;
	if (abs)
		out[o++] = '/';
	size_t i = 0;
	while (i < n) {
		while (i < n && p[i] == '/')
			i++;
		size_t j = i;
		while (j < n && p[j] != '/')
			j++;
		size_t l = j - i;
		if (l == 0 || (l == 1 && p[i] == '.')) {
			// skip
		} else if (l == 2 && p[i] == '.' && p[i + 1] == '.') {
			if (depth > dotdots) {
				o = starts[--depth];
				if (o > (size_t)abs && out[o - 1] == '/')
					o--;
				else if (o == (size_t)abs && depth == 0)
					o = abs;
			} else if (!abs) {
				if (o > 0)
					out[o++] = '/';
				starts[depth++] = o - (o > 0 ? 0 : 0);
				memcpy(out + o, "..", 2);
				o += 2;
				dotdots++;
			}
		} else {
			if (o > (size_t)abs)
				out[o++] = '/';
			starts[depth++] = o;
			memcpy(out + o, p + i, l);
			o += l;
		}
		i = j;
	}
	if (o == 0)
		out[o++] = '.';
	out[o] = 0;
	free(starts);
	return out;
}

// log_rel_of checks that path lies below dir (filepath.Rel + IsLocal) and returns the
// relative path, or NULL with the error text in err.
static char *log_rel_of(const char *dir, const char *path, char *err, size_t errn) {
	char *d = path_clean(dir), *p = path_clean(path), *rel = NULL;
	size_t dl = strlen(d);
	bool rootdir = strcmp(d, "/") == 0;
	if ((d[0] == '/') == (p[0] == '/') && strcmp(d, ".") != 0 && strncmp(p, d, dl) == 0 &&
	    (rootdir || p[dl] == '/') && p[rootdir ? 1 : dl + 1] != 0)
		rel = xstrdup(p + (rootdir ? 1 : dl + 1));
	else if (strcmp(d, ".") == 0 && p[0] != '/' && strcmp(p, ".") != 0 && strncmp(p, "../", 3) != 0 && strcmp(p, "..") != 0)
		rel = xstrdup(p);
	free(d);
	free(p);
	// What Rel gives must be local (filepath.IsLocal): a directory of ".." components
	// alone is a prefix of "../../x", whose rest "../x" lies outside it.
	if (rel && (strcmp(rel, "..") == 0 || strncmp(rel, "../", 3) == 0)) {
		free(rel);
		rel = NULL;
	}
	if (!rel)
		snprintf(err, errn, "log file \"%s\" is not below the log directory \"%s\"", path, dir);
	return rel;
}

struct open_how_ {
	uint64_t flags, mode, resolve;
};

static bool openat2_missing;

// open_beneath opens rel below dir without following a symlink; -1 with errno and err.
static int open_beneath(const char *dir, const char *rel, char *err, size_t errn) {
	int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		snprintf(err, errn, "open log %s/%s: open log directory: open %s: %s", dir, rel, dir, errstr(errno));
		return -1;
	}
	int fd = -1, e = 0;
	if (!openat2_missing) {
		struct open_how_ how = {.flags = (uint64_t)flags, .mode = 0640, .resolve = 0x08 | 0x04 | 0x02};
		for (int i = 0; i < 8; i++) {
			fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof how);
			e = fd < 0 ? errno : 0;
			if (fd >= 0 || (e != EAGAIN && e != EINTR))
				break;
		}
		if (fd < 0 && e == ENOSYS)
			openat2_missing = true;
	}
	if (openat2_missing) {
		int cur = dup(dfd);
		char *copy = xstrdup(rel), *save = NULL;
		char *part = strtok_r(copy, "/", &save);
		e = 0;
		while (part && cur >= 0) {
			char *next = strtok_r(NULL, "/", &save);
			int nfd;
			if (next)
				nfd = openat(cur, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			else
				nfd = fd = openat(cur, part, flags, 0640);
			if (nfd < 0)
				e = errno;
			close(cur);
			cur = next ? nfd : -1;
			part = next;
		}
		if (cur >= 0)
			close(cur);
		free(copy);
	}
	close(dfd);
	if (fd < 0) {
		if (e == ELOOP || e == EXDEV)
			snprintf(err, errn, "open log %s/%s: a path component is a symlink, which is not followed: %s", dir,
				 rel, errstr(e));
		else
			snprintf(err, errn, "open log %s/%s: %s", dir, rel, errstr(e));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errn, "open log %s/%s: not a regular file (mode %#o)", dir, rel, st.st_mode & S_IFMT);
		close(fd);
		return -1;
	}
	if (st.st_nlink > 1) {
		// A link planted at the log path would have root append to the file it names.
		snprintf(err, errn, "open log %s/%s: the file has %lu hard links: a log file has one, so it is not written",
			 dir, rel, (unsigned long)st.st_nlink);
		close(fd);
		return -1;
	}
	set_nonblock(fd, false);
	return fd;
}

// log_open opens the CRI log at path below dir (empty: path's directory).
bool log_open(const char *dir, const char *path, char *err, size_t errn) {
	char *d;
	if (!dir || !*dir) {
		d = xstrdup(path);
		char *s = strrchr(d, '/');
		if (s == d)
			s[1] = 0;
		else if (s)
			*s = 0;
		else
			strcpy(d, ".");
	} else {
		d = xstrdup(dir);
	}
	char *rel = log_rel_of(d, path, err, errn);
	if (!rel) {
		free(d);
		return false;
	}
	int fd = open_beneath(d, rel, err, errn);
	if (fd < 0) {
		free(d);
		free(rel);
		return false;
	}
	log_dir = d;
	log_rel = rel;
	log_fd = fd;
	return true;
}

bool log_reopen(char *err, size_t errn) {
	int fd = open_beneath(log_dir, log_rel, err, errn);
	if (fd < 0)
		return false;
	close(log_fd);
	log_fd = fd;
	return true;
}

static unsigned long log_dropped; // entries lost since the last that was written

// log_entry appends one entry. A short write is continued; an error (a full disk, most
// often) drops the entry whole: the file is cut back to where the entry began, so that
// no torn line runs into the next entry (kubelet skips a line it cannot parse, and would
// lose both). The log says when dropping starts and how many entries it cost.
void log_entry(const char *stream, char tag, const char *text, size_t n) {
	if (log_fd < 0)
		return;
	char hdr[64];
	size_t l = rfc3339nano(hdr, sizeof hdr);
	l += snprintf(hdr + l, sizeof hdr - l, " %s %c ", stream, tag);
	struct iovec iov[3] = {{hdr, l}, {(void *)text, n}, {"\n", 1}};
	struct iovec *v = iov;
	int k = 3;
	size_t written = 0;
	while (k > 0) {
		ssize_t w = writev(log_fd, v, k);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			// The only writer, appending: the entry began where the file ends, less what
			// went in.
			struct stat st;
			if (written > 0 && (fstat(log_fd, &st) < 0 || ftruncate(log_fd, st.st_size - (off_t)written) < 0))
				diag("container log: cut back a torn entry: %s", errstr(errno));
			if (log_dropped++ == 0)
				diag("container log: write: %s; entries are dropped until a write succeeds", errstr(e));
			return;
		}
		written += (size_t)w;
		iov_skip(&v, &k, w);
	}
	if (log_dropped > 0) {
		diag("container log: writing again; %lu entries were dropped", log_dropped);
		log_dropped = 0;
	}
}
