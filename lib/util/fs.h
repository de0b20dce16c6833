// fs.h - read-only file mappings and atomic (temp + fsync + rename) writes.
//
// Every output file oscar produces goes through osc_atomic_file: the data is
// written to "<path>.tmp.<pid>" in the target directory, fsync'ed, renamed
// over <path>, and the directory is fsync'ed. A failure or an abort before
// commit leaves no half-written <path> behind. Output directories (artifacts,
// reports) go through osc_dir_stage the same way, as a whole.
//
// Temporaries of a writer that was killed stay behind; the next writer of the
// same path removes them: only names of exactly our patterns ("<name>.tmp.<pid>",
// ".<name>.tmp.<pid>", ".<name>.old.<pid>") whose pid is not a live process.
#ifndef OSCAR_UTIL_FS_H
#define OSCAR_UTIL_FS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/error.h"

// A read-only mapping of a whole file. An empty file maps to data == NULL,
// size == 0.
struct osc_mapped_file {
    const uint8_t * data;
    size_t          size;
    char *          path; // owned copy, for error messages
};

// Refuses FIFOs, devices and directories without opening them.
enum oscar_status osc_map_file(const char * path, struct osc_mapped_file * out);
void osc_unmap_file(struct osc_mapped_file * f);
// Drops the resident pages behind bytes [p, p + n) of a read-only mapping (the
// pages that p..p+n touches, whole): a later read faults them in from the file
// again. A weight read once (a layer dequantised to fp32) then stops counting
// in the process's resident set. Advice only: failure changes nothing.
void osc_mapped_drop(const void * p, size_t n);
// The pages of [p, p + n) of a mapped file about to be read once, mapped ahead in one call
// (best effort: a kernel without MADV_POPULATE_READ leaves them to the reads' faults).
void osc_mapped_will_read(const void * p, size_t n);

// OSCAR_OK when `path` is a regular file (stat only, nothing is opened), else
// OSCAR_ERR_IO naming the path: for inputs that must be files (model files,
// config.json, tokenizer.json), so that a FIFO fails at once instead of
// blocking in open() until something writes to it.
enum oscar_status osc_require_regular(const char * path);

// Reads a whole file into a malloc'ed, NUL-terminated buffer (caller frees).
// Fails with OSCAR_ERR_INVALID if the file is larger than max_bytes. Pipes
// are read too (a corpus from a process substitution); a FIFO without a
// writer blocks in open().
enum oscar_status osc_read_file(const char * path, size_t max_bytes, char ** out, size_t * out_size);

struct osc_atomic_file {
    FILE * fp;        // write through this
    char * path;      // final path
    char * tmp_path;  // temporary path in the same directory
};

// Opens a temporary file next to `path` for writing.
enum oscar_status osc_atomic_open(struct osc_atomic_file * f, const char * path);
// Flushes, fsyncs, renames into place. Always releases `f`; on failure the
// temporary file is removed.
enum oscar_status osc_atomic_commit(struct osc_atomic_file * f);
// Discards the temporary file (safe to call after a failed commit or twice).
void osc_atomic_abort(struct osc_atomic_file * f);

// Writes `size` bytes atomically to `path`.
enum oscar_status osc_write_file_atomic(const char * path, const void * data, size_t size);

// Removes the "<path>.tmp.<pid>" files that dead writers of `path` left
// (osc_atomic_open does this itself; call it after removing `path`).
void osc_remove_stale_temps(const char * path);

// ---- output directories, replaced whole -----------------------------------------
// The files are written into a staging sibling "<parent>/.<name>.tmp.<pid>";
// commit swaps it with an existing <dir> in one renameat2(RENAME_EXCHANGE) and
// then removes the old contents, so <dir> is never missing. (A filesystem
// without RENAME_EXCHANGE gets two renames through ".<name>.old.<pid>".)
struct osc_dir_stage {
    char * dir;    // destination, trailing slashes removed
    char * parent; // its parent directory
    char * tmp;    // the staging directory: write the files here
    char * old;    // where the old directory waits in the two-rename fallback
};

// Checks the destination and creates the staging directory: `dir` must have
// a name (not empty, ".", ".."), its parent is created (mkdir -p) and must
// let us create the staging directory there, and an existing `dir` must be a
// real directory holding only regular files named in `files` (NULL-terminated;
// `what` names them in the error, e.g. "an oscar artifact"). Removes stale
// staging siblings of dead writers first. Errors name `dir` and the problem.
enum oscar_status osc_dir_stage_open(struct osc_dir_stage * s, const char * dir, const char * what,
                                     const char * const * files);
// fsyncs the staging directory and puts it in place (see above). Always
// releases `s`; on failure the staging directory is removed and `dir` is unchanged.
enum oscar_status osc_dir_stage_commit(struct osc_dir_stage * s);
// Removes the staging directory (safe after a failed commit or twice).
void osc_dir_stage_abort(struct osc_dir_stage * s);
// The checks of osc_dir_stage_open without keeping anything: a pre-flight
// before hours of compute.
enum oscar_status osc_dir_check_dest(const char * dir, const char * what, const char * const * files);

// mkdir -p. Existing directories are fine.
enum oscar_status osc_mkdirs(const char * path);

// Joins two path components with '/' into a malloc'ed string (caller frees).
char * osc_path_join(const char * a, const char * b);

#endif
