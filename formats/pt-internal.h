// pt-internal.h - the two halves of the .pt reader (pt-reader.h): a ZIP
// directory reader and a restricted unpickler. Not installed.
#ifndef OSCAR_FORMATS_PT_INTERNAL_H
#define OSCAR_FORMATS_PT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/pt-reader.h"
#include "util/error.h"

// ---- ZIP (pt-zip.c) ------------------------------------------------------------
// The central directory of an in-memory archive: stored and deflated records
// only (ZIP64 end record and zip64 extra fields read), no encryption, no
// multi-disk archives, no duplicate names,
// no name with a ".." component, a leading '/' or a backslash.
struct osc_zip_entry {
    char *   name;
    uint16_t method; // 0 stored, 8 deflated
    uint32_t crc;
    uint64_t csize, usize;
    uint64_t data_off; // of the record's bytes in the archive
};

struct osc_zip {
    const uint8_t *        data;
    size_t                 size;
    const char *           label; // the file, for messages
    struct osc_zip_entry * e;
    uint32_t               n;
};

enum oscar_status osc_zip_open(struct osc_zip * z, const uint8_t * data, size_t size, const char * label);
void              osc_zip_close(struct osc_zip * z);
const struct osc_zip_entry * osc_zip_find(const struct osc_zip * z, const char * name);
// The record's bytes, CRC-checked: stored ones point into the archive, deflated
// ones are inflated into *owned (malloc'ed; the caller frees). Records larger
// than max_bytes are refused.
enum oscar_status osc_zip_read(const struct osc_zip * z, const struct osc_zip_entry * e, uint64_t max_bytes,
                               const uint8_t ** out, uint8_t ** owned);

// ---- pickle (pt-pickle.c) ------------------------------------------------------
// Resolves a persistent id ('storage', <storage class>, key, location, numel):
// the raw bytes of data/<key>. The callee checks the record exists.
typedef enum oscar_status (*osc_pt_storage_fn)(void * ctx, const char * key, const uint8_t ** data,
                                               uint64_t * nbytes);

struct osc_pt_vm; // the values it made, freed together

// Interprets data.pkl (`label` names it in messages). *root is owned by *vm.
enum oscar_status osc_pt_unpickle(const uint8_t * pkl, size_t n, const char * label, osc_pt_storage_fn load,
                                  void * ctx, struct osc_pt_vm ** vm, const struct osc_pt_value ** root);
void              osc_pt_vm_free(struct osc_pt_vm * vm);

#endif
