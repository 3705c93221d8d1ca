#ifndef BABYBASICS_CLIBPQ_SHIM_H
#define BABYBASICS_CLIBPQ_SHIM_H
// The one C header the Swift wrapper sees. pkg-config (`libpq`) supplies the include path:
// Debian/Ubuntu `apt-get install libpq-dev`, macOS `brew install libpq`.
#include <libpq-fe.h>
#include <dlfcn.h>

/// libpq 17's PQsendPipelineSync (a Sync queued without flushing), looked up at run time: the
/// package builds against older libpq too, where this returns NULL and PQpipelineSync is used.
typedef int (*bb_send_pipeline_sync_fn)(PGconn *conn);
static inline bb_send_pipeline_sync_fn bb_send_pipeline_sync_function(void) {
    void *self = dlopen(NULL, RTLD_LAZY);
    if (self == NULL) return NULL;
    return (bb_send_pipeline_sync_fn)dlsym(self, "PQsendPipelineSync");
}
#endif
