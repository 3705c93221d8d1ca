#ifndef BABYBASICS_CLIBPQ_SHIM_H
#define BABYBASICS_CLIBPQ_SHIM_H
// The one C header the Swift wrapper sees. pkg-config (`libpq`) supplies the include path:
// Debian/Ubuntu `apt-get install libpq-dev`, macOS `brew install libpq`.
#include <libpq-fe.h>
#endif
