/* What symmem's PMIx engine uses of the PMIx client API (Debian: libpmix-dev). */
#include <pmix.h>
