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

/// Asks OpenSSL (which libpq loads for TLS and SCRAM) not to free its global state from an
/// `atexit` handler. When a process exits while another thread is inside libpq (a pool opening
/// a connection, say), that handler frees OpenSSL's locks under the other thread, which then
/// crashes on a NULL lock: the process dies with SIGSEGV after its work succeeded. The memory is
/// the operating system's to reclaim at exit anyway. Only the first `OPENSSL_init_crypto` call
/// decides, so this runs before libpq's first connection (the flag is `OPENSSL_INIT_NO_ATEXIT`,
/// OpenSSL 1.1.1+; the function is looked up, not linked). 1: OpenSSL took the flag; 0: it
/// refused; -1: no OpenSSL in the process (a libpq built without it).
typedef int (*bb_openssl_init_crypto_fn)(unsigned long long opts, const void *settings);
static inline int bb_openssl_skip_cleanup_at_exit(void) {
    void *self = dlopen(NULL, RTLD_LAZY);
    if (self == NULL) return 0;
    bb_openssl_init_crypto_fn init = (bb_openssl_init_crypto_fn)dlsym(self, "OPENSSL_init_crypto");
    if (init == NULL) return -1;  /* a libpq built without OpenSSL: nothing to keep */
    return init(0x00080000ULL /* OPENSSL_INIT_NO_ATEXIT */, NULL);
}
#endif
