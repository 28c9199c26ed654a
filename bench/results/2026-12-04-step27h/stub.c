#include <stdint.h>
static int64_t next = 1000;
int64_t s_async(void *in, void *out, int32_t dtype, int64_t *shape, int64_t ndim, int32_t op, double pre, double post, int32_t set, char *name, int32_t prio, char *err, int64_t errlen){ return next++; }
int32_t s_sync(void *in, void *out, int32_t dtype, int64_t *shape, int64_t ndim, int32_t op, double pre, double post, int32_t set, char *name, int32_t prio, char *err, int64_t errlen){ return 0; }
int32_t s_wait(int64_t h, char *e, int64_t l){ return 0; }
int32_t s_release(int64_t h, char *e, int64_t l){ return 0; }
int32_t s_reap(int64_t h, int64_t *c, int64_t n, int64_t *r, int64_t cap, char *e, int64_t l){
  int64_t k = 0; r[k++] = h;
  for (int64_t i = 0; i < n && k < cap; i++) if (c[i] != h) r[k++] = c[i];
  return (int32_t)k; }
