// oscar-zoo-layout.c - the zoo folder name of an artifact, and a staged copy with the .pt pair.
#include "formats/oscar-zoo-layout.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/oscar-export.h"
#include "util/fs.h"

static int is_name_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
}

// The model part: a Hub id's last component, spaces and the like as '-'.
static enum oscar_status model_name(const struct oscar_artifact * a, const char * given, char * out, size_t n) {
    const char * id  = oscar_artifact_get_meta(a, "oscar.base_model_id");
    const char * src = given ? given : id && *id ? id : oscar_artifact_get_meta(a, "oscar.base_model");
    if (!given && src && src == id && strrchr(src, '/')) src = strrchr(src, '/') + 1;
    if (!src || !*src || !strcmp(src, "unknown"))
        return osc_error(OSCAR_ERR_INVALID, "the artifact records no base model name (oscar.base_model_id / "
                         "oscar.base_model) for the zoo folder <Model>; give one with --zoo-model NAME");
    size_t i = 0;
    for (; src[i] && i + 1 < n; i++) out[i] = is_name_char(src[i]) ? src[i] : '-';
    out[i] = '\0';
    if (src[i] || !strcmp(out, ".") || !strcmp(out, ".."))
        return osc_error(OSCAR_ERR_INVALID, "'%s': not usable as the zoo folder <Model> (too long or a dot name)", src);
    return OSCAR_OK;
}

enum oscar_status oscar_zoo_layout_path(const struct oscar_artifact * a, const char * model, char * buf, size_t n) {
    char              name[128];
    enum oscar_status st = model_name(a, model, name, sizeof name);
    if (st != OSCAR_OK) return st;
    const char * tag = oscar_artifact_get_meta(a, "oscar.calib_tag");
    long         T, N, G;
    int          used = 0;
    if (!tag || sscanf(tag, "seq%ld_prompt%ld_group%ld%n", &T, &N, &G, &used) != 3 || tag[used] || T < 0 || N < 0 ||
        G < 1)
        return osc_error(OSCAR_ERR_INVALID, "oscar.calib_tag is '%s', not seq<T>_prompt<N>_group<G>: the zoo layout "
                         "has no folder for it (push it with --layout flat and --path-in-repo)", tag ? tag : "(absent)");
    if ((size_t) snprintf(buf, n, "%s/%s", name, tag) >= n) return osc_error(OSCAR_ERR_INVALID, "zoo path too long");
    return OSCAR_OK;
}

static enum oscar_status copy_file(const char * from, const char * to) {
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0) return osc_error(OSCAR_ERR_IO, "%s: cannot open: %s", from, strerror(errno));
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        return osc_error(OSCAR_ERR_IO, "%s: cannot create: %s", to, strerror(errno));
    }
    enum oscar_status st = OSCAR_OK;
    char              buf[1 << 16];
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { st = osc_error(OSCAR_ERR_IO, "%s: read: %s", from, strerror(errno)); break; }
        if (r == 0) break;
        for (ssize_t off = 0; off < r && st == OSCAR_OK;) {
            ssize_t w = write(out, buf + off, (size_t) (r - off));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) st = osc_error(OSCAR_ERR_IO, "%s: write: %s", to, strerror(errno));
            else off += w;
        }
        if (st != OSCAR_OK) break;
    }
    close(in);
    if (close(out) != 0 && st == OSCAR_OK) st = osc_error(OSCAR_ERR_IO, "%s: close: %s", to, strerror(errno));
    return st;
}

static int ends_with(const char * s, const char * tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

// The artifact folder's regular top-level files (not dot files, not .pt: those are re-exported).
static enum oscar_status copy_files(const char * dir, const char * stage) {
    DIR * d = opendir(dir);
    if (!d) return osc_error(OSCAR_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    enum oscar_status st = OSCAR_OK;
    struct dirent *   e;
    while (st == OSCAR_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.' || ends_with(e->d_name, ".pt")) continue;
        char *      from = osc_path_join(dir, e->d_name), * to = osc_path_join(stage, e->d_name);
        struct stat sb;
        if (!from || !to) st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        else if (lstat(from, &sb) != 0) st = osc_error(OSCAR_ERR_IO, "%s: %s", from, strerror(errno));
        else if (S_ISREG(sb.st_mode)) st = copy_file(from, to);
        free(from);
        free(to);
    }
    closedir(d);
    return st;
}

enum oscar_status oscar_zoo_layout_stage(const char * dir, const struct oscar_artifact * a, char ** stage) {
    const char * tmp = getenv("TMPDIR");
    char *       tmpl = osc_path_join(tmp && *tmp ? tmp : "/tmp", "oscar-zoo-push.XXXXXX");
    *stage = NULL;
    if (!tmpl) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    if (!mkdtemp(tmpl)) {
        enum oscar_status st = osc_error(OSCAR_ERR_IO, "%s: cannot create a staging folder: %s", tmpl, strerror(errno));
        free(tmpl);
        return st;
    }
    enum oscar_status st = copy_files(dir, tmpl);
    char *            kp = NULL, * vp = NULL;
    if (st == OSCAR_OK) st = oscar_export_pt(a, tmpl, &kp, &vp);
    free(kp);
    free(vp);
    if (st != OSCAR_OK) {
        oscar_zoo_layout_unstage(tmpl);
        return st;
    }
    *stage = tmpl;
    return OSCAR_OK;
}

void oscar_zoo_layout_unstage(char * stage) {
    if (!stage) return;
    DIR * d = opendir(stage);
    if (d) {
        struct dirent * e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char * p = osc_path_join(stage, e->d_name);
            if (p) unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(stage);
    free(stage);
}
