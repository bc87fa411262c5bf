/* C tests of shoal's C ABI, run by `make test` under Valgrind (leaks fail
 * the run). Usage: test_shoal FIXTURE_DIR N DIM, where the fixture is made
 * by `shoal-c-fixture FIXTURE_DIR` (it prints N and DIM). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shoal.h"

static int failures = 0;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, "\n");                              \
      failures++;                                         \
    }                                                     \
  } while (0)

#define CHECK_OK(call)                                                        \
  do {                                                                        \
    ShoalStatus st_ = (call);                                                 \
    CHECK(st_ == SHOAL_STATUS_OK, "%s -> %d: %s", #call, (int)st_, shoal_last_error()); \
  } while (0)

/* The rows of a result stream, column by column. */
typedef struct {
  size_t n;
  uint32_t *query;
  uint64_t *row;
  float *dist;
  size_t columns;
} Rows;

static void rows_free(Rows *r) {
  free(r->query);
  free(r->row);
  free(r->dist);
  memset(r, 0, sizeof *r);
}

static int column_of(const struct ArrowSchema *s, const char *name) {
  for (int64_t i = 0; i < s->n_children; i++)
    if (strcmp(s->children[i]->name, name) == 0) return (int)i;
  return -1;
}

/* Reads and releases `stream`. */
static Rows collect(struct ArrowArrayStream *stream) {
  Rows r = {0};
  struct ArrowSchema schema;
  if (stream->get_schema(stream, &schema) != 0) {
    CHECK(0, "get_schema failed: %s", stream->get_last_error(stream));
    stream->release(stream);
    return r;
  }
  r.columns = (size_t)schema.n_children;
  int cq = column_of(&schema, "_query_index"), cr = column_of(&schema, "_rowid"),
      cd = column_of(&schema, "_distance");
  CHECK(cq == 0 && cr == 1 && cd == 2, "columns %d %d %d", cq, cr, cd);
  CHECK(strcmp(schema.children[0]->format, "I") == 0, "_query_index is uint32");
  CHECK(strcmp(schema.children[1]->format, "L") == 0, "_rowid is uint64");
  CHECK(strcmp(schema.children[2]->format, "f") == 0, "_distance is float32");
  for (;;) {
    struct ArrowArray batch;
    if (stream->get_next(stream, &batch) != 0) {
      CHECK(0, "get_next failed: %s", stream->get_last_error(stream));
      break;
    }
    if (batch.release == NULL) break;
    size_t m = (size_t)batch.length;
    r.query = realloc(r.query, (r.n + m) * sizeof *r.query);
    r.row = realloc(r.row, (r.n + m) * sizeof *r.row);
    r.dist = realloc(r.dist, (r.n + m) * sizeof *r.dist);
    const struct ArrowArray *q = batch.children[cq], *w = batch.children[cr], *d = batch.children[cd];
    for (size_t i = 0; i < m; i++) {
      r.query[r.n + i] = ((const uint32_t *)q->buffers[1])[q->offset + batch.offset + i];
      r.row[r.n + i] = ((const uint64_t *)w->buffers[1])[w->offset + batch.offset + i];
      r.dist[r.n + i] = ((const float *)d->buffers[1])[d->offset + batch.offset + i];
    }
    r.n += m;
    batch.release(&batch);
  }
  schema.release(&schema);
  stream->release(stream);
  return r;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static int rows_equal(const Rows *a, const Rows *b) {
  if (a->n != b->n) return 0;
  for (size_t i = 0; i < a->n; i++)
    if (a->query[i] != b->query[i] || a->row[i] != b->row[i] || !same_bits(a->dist[i], b->dist[i]))
      return 0;
  return 1;
}

/* Ordered by (query, distance, row id); at most k rows per query. */
static void check_order(const Rows *r, uint32_t k, const char *what) {
  size_t run = 0;
  for (size_t i = 0; i < r->n; i++) {
    run = (i > 0 && r->query[i] == r->query[i - 1]) ? run + 1 : 1;
    CHECK(run <= k, "%s: more than k rows for query %u", what, r->query[i]);
    if (i == 0) continue;
    int ordered = r->query[i - 1] < r->query[i] ||
                  (r->query[i - 1] == r->query[i] &&
                   (r->dist[i - 1] < r->dist[i] ||
                    (r->dist[i - 1] == r->dist[i] && r->row[i - 1] < r->row[i])));
    CHECK(ordered, "%s: row %zu out of order", what, i);
  }
}

static ShoalStatus search(const ShoalDataset *ds, const float *q, size_t n, size_t dim,
                          const ShoalSearchOptions *o, Rows *out) {
  struct ArrowArrayStream stream;
  memset(&stream, 0, sizeof stream);
  ShoalStatus st = shoal_search(ds, q, n, dim, o, &stream, NULL);
  if (st == SHOAL_STATUS_OK) {
    *out = collect(&stream);
  } else {
    CHECK(stream.release == NULL, "a failed search wrote its output");
  }
  return st;
}

static float *read_queries(const char *dir, size_t n, size_t dim) {
  char path[4096];
  snprintf(path, sizeof path, "%s/queries.f32", dir);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  float *q = malloc(n * dim * sizeof *q);
  size_t got = fread(q, sizeof *q, n * dim, f);
  fclose(f);
  if (got != n * dim) {
    free(q);
    return NULL;
  }
  return q;
}

/* Each split searched alone, merged, equals the whole search. */
static void check_splits_merge(const ShoalDataset *ds, const float *q, size_t n, size_t dim,
                               ShoalSearchOptions base, const char *what) {
  ShoalSplitList *splits = NULL;
  CHECK_OK(shoal_dataset_splits(ds, NULL, &splits));
  if (!splits) return;
  Rows whole = {0};
  CHECK_OK(search(ds, q, n, dim, &base, &whole));
  check_order(&whole, base.k, what);
  struct ArrowArrayStream *parts = calloc(splits->count, sizeof *parts);
  for (size_t s = 0; s < splits->count; s++) {
    ShoalSearchOptions o = base;
    o.split = splits->splits[s].fragment_ids;
    o.split_len = splits->splits[s].fragment_count;
    CHECK_OK(shoal_search(ds, q, n, dim, &o, &parts[s], NULL));
  }
  struct ArrowArrayStream merged;
  memset(&merged, 0, sizeof merged);
  CHECK_OK(shoal_merge_splits(parts, splits->count, base.k, base.offset, &merged));
  for (size_t s = 0; s < splits->count; s++)
    CHECK(parts[s].release == NULL, "%s: part %zu not taken over", what, s);
  CHECK(merged.release != NULL, "%s: the merge returned OK without a stream", what);
  if (merged.release) {
    Rows m = collect(&merged);
    CHECK(rows_equal(&m, &whole), "%s: merged splits (%zu rows) differ from the whole search (%zu rows)",
          what, m.n, whole.n);
    rows_free(&m);
  }
  CHECK(whole.n > 0, "%s: no rows", what);
  rows_free(&whole);
  free(parts);
  shoal_split_list_free(splits);
}

typedef struct {
  const ShoalDataset *ds;
  const float *q;
  size_t n, dim;
  ShoalCancel *cancel;
  ShoalStatus last;
  /* Searches completed; set by the searcher. */
  atomic_int runs;
  /* 1 while a search call is under way. */
  atomic_int in_search;
  /* Set when the searcher returns. */
  atomic_int done;
} Searcher;

/* Searches until one fails (the cancel). */
static void *search_until_cancelled(void *arg) {
  Searcher *s = arg;
  ShoalSearchOptions o = shoal_search_options_default();
  o.cancel = s->cancel;
  o.exact = 1;
  for (int i = 0; i < 100000; i++) {
    struct ArrowArrayStream stream;
    memset(&stream, 0, sizeof stream);
    atomic_store(&s->in_search, 1);
    s->last = shoal_search(s->ds, s->q, s->n, s->dim, &o, &stream, NULL);
    atomic_store(&s->in_search, 0);
    if (s->last != SHOAL_STATUS_OK) break;
    stream.release(&stream);
    atomic_fetch_add(&s->runs, 1);
  }
  atomic_store(&s->done, 1);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s FIXTURE_DIR N DIM\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  size_t n = (size_t)atoi(argv[2]), dim = (size_t)atoi(argv[3]);
  float *q = read_queries(dir, n, dim);
  if (!q) {
    fprintf(stderr, "cannot read %s/queries.f32\n", dir);
    return 2;
  }
  char uri[4096];
  snprintf(uri, sizeof uri, "%s/ds", dir);

  ShoalSession *session = NULL;
  CHECK(shoal_session_open("[search]\nthreads = 2\n", &session) == SHOAL_STATUS_OK, "session: %s",
        shoal_last_error());
  CHECK(shoal_session_open("[search]\nthreads = \"many\"\n", &session) == SHOAL_STATUS_INVALID_ARGUMENT,
        "a bad config is refused");
  ShoalDataset *ds = NULL, *v1 = NULL, *missing = NULL;
  CHECK_OK(shoal_dataset_open(session, uri, -1, &ds));
  CHECK_OK(shoal_dataset_open(session, uri, 1, &v1));
  CHECK(shoal_dataset_version(v1) == 1 && shoal_dataset_version(ds) > 1, "pinned versions");
  CHECK(shoal_dataset_count_rows(v1) < shoal_dataset_count_rows(ds), "version 1 has fewer rows");
  CHECK(shoal_dataset_open(session, uri, 999, &missing) == SHOAL_STATUS_NOT_FOUND, "version 999");
  CHECK(shoal_dataset_open(session, "/nonexistent/shoal", -1, &missing) != SHOAL_STATUS_OK,
        "a missing dataset");
  CHECK(strlen(shoal_last_error()) > 0, "the error has a message");
  CHECK(missing == NULL, "nothing opened");

  /* Splits: trained segment, delta segment, two unindexed fragments. */
  ShoalSplitList *splits = NULL;
  CHECK_OK(shoal_dataset_splits(ds, NULL, &splits));
  if (splits) {
    size_t indexed = 0, fragments = 0;
    uint64_t rows = 0;
    for (size_t i = 0; i < splits->count; i++) {
      indexed += (size_t)splits->splits[i].indexed;
      fragments += splits->splits[i].fragment_count;
      rows += splits->splits[i].rows;
    }
    CHECK(splits->count == 4 && indexed == 2 && fragments == 5, "splits %zu, indexed %zu, fragments %zu",
          splits->count, indexed, fragments);
    CHECK(rows == shoal_dataset_count_rows(ds), "split rows add up");
    shoal_split_list_free(splits);
  }

  /* A batch of one and the whole batch; duplicate queries answer alike. */
  ShoalSearchOptions o = shoal_search_options_default();
  Rows one = {0}, many = {0};
  CHECK_OK(search(ds, q, 1, dim, &o, &one));
  CHECK(one.n == 10, "batch of one: %zu rows", one.n);
  check_order(&one, 10, "batch of one");
  CHECK_OK(search(ds, q, n, dim, &o, &many));
  CHECK(many.n == n * 10, "batch of %zu: %zu rows", n, many.n);
  check_order(&many, 10, "batch");
  for (size_t i = 0; i < 10 && i < many.n; i++)
    CHECK(many.row[i] == one.row[i] && same_bits(many.dist[i], one.dist[i]),
          "query 0 alone and in the batch differ at %zu", i);
  /* Queries n-2 and n-1 repeat queries 0 and 3. */
  for (size_t i = 0; i < 10 && many.n == n * 10; i++) {
    CHECK(many.row[(n - 2) * 10 + i] == many.row[i], "repeated query 0");
    CHECK(many.row[(n - 1) * 10 + i] == many.row[3 * 10 + i], "repeated query 3");
  }
  rows_free(&one);
  rows_free(&many);

  /* Projection and explain. */
  {
    const char *project[] = {"category", "len"};
    ShoalSearchOptions p = shoal_search_options_default();
    p.project = project;
    p.project_len = 2;
    p.filter = "category = 'noun'";
    struct ArrowArrayStream stream;
    char *explain = NULL;
    CHECK_OK(shoal_search(ds, q, 4, dim, &p, &stream, &explain));
    CHECK(explain && strstr(explain, "\"mode\"") && strstr(explain, "distinct_partitions") &&
              strstr(explain, "prefilter_builds"),
          "explain: %s", explain ? explain : "(null)");
    shoal_string_free(explain);
    Rows r = collect(&stream);
    CHECK(r.columns == 5 && r.n == 40, "projected: %zu columns, %zu rows", r.columns, r.n);
    rows_free(&r);
  }

  /* Empty results: a filter nothing matches. */
  {
    ShoalSearchOptions e = shoal_search_options_default();
    e.filter = "len > 1000";
    Rows r = {0};
    CHECK_OK(search(ds, q, 3, dim, &e, &r));
    CHECK(r.n == 0 && r.columns == 3, "empty: %zu rows", r.n);
    rows_free(&r);
  }

  /* Bad input: refused with a message, no output written. */
  {
    Rows r = {0};
    ShoalSearchOptions b = shoal_search_options_default();
    CHECK(search(NULL, q, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "null dataset");
    CHECK(search(ds, NULL, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "null queries");
    CHECK(search(ds, q, 0, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "n = 0");
    CHECK(search(ds, q, 1, dim - 1, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "wrong dim");
    CHECK(strstr(shoal_last_error(), "dimension") != NULL, "dimension message: %s", shoal_last_error());
    float *nan = malloc(dim * sizeof *nan);
    memcpy(nan, q, dim * sizeof *nan);
    nan[3] = NAN;
    CHECK(search(ds, nan, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "NaN");
    free(nan);
    b.k = 0;
    CHECK(search(ds, q, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "k = 0");
    b.k = 1u << 30;
    CHECK(search(ds, q, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "k over the limit");
    CHECK(strstr(shoal_last_error(), "limit") != NULL || strstr(shoal_last_error(), "max") != NULL,
          "limit message: %s", shoal_last_error());
    b = shoal_search_options_default();
    b.column = "nope";
    CHECK(search(ds, q, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "unknown column");
    b = shoal_search_options_default();
    b.filter = "len >>> 3";
    CHECK(search(ds, q, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "bad filter");
    b = shoal_search_options_default();
    b.metric = "hamming";
    CHECK(search(ds, q, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "unknown metric");
    b.metric = "cosine";
    CHECK(search(ds, q, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "index of another metric");
    b = shoal_search_options_default();
    uint32_t bad_split[] = {77};
    b.split = bad_split;
    b.split_len = 1;
    CHECK(search(ds, q, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "fragment not in snapshot");
    b.split = NULL;
    CHECK(search(ds, q, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "null split, length 1");
    b = shoal_search_options_default();
    const char *project[] = {NULL};
    b.project = project;
    b.project_len = 1;
    CHECK(search(ds, q, 1, dim, &b, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "null projected name");
    CHECK(shoal_search(ds, q, 1, dim, NULL, NULL, NULL) == SHOAL_STATUS_INVALID_ARGUMENT, "null out");
    ShoalSplitList *none = NULL;
    CHECK(shoal_dataset_splits(ds, "nope", &none) == SHOAL_STATUS_INVALID_ARGUMENT && none == NULL,
          "splits of an unknown column");
    size_t too_many = 100000;
    float *big = calloc(too_many * dim, sizeof *big);
    CHECK(search(ds, big, too_many, dim, NULL, &r) == SHOAL_STATUS_INVALID_ARGUMENT, "batch over the limit");
    free(big);
    /* The dataset still answers as before. */
    Rows again = {0};
    CHECK_OK(search(ds, q, 1, dim, NULL, &again));
    CHECK(again.n == 10, "after bad input: %zu rows", again.n);
    rows_free(&again);
  }

  /* Split searches merged per query equal the whole search, bit for bit. */
  {
    uint32_t ks[] = {1, 5, 10, 25};
    uint32_t offsets[] = {0, 3, 0, 7};
    const char *filters[] = {NULL, "category = 'verb'", "len < 4", NULL};
    uint32_t nprobes[] = {0, 2, 16, 4};
    for (int i = 0; i < 4; i++) {
      ShoalSearchOptions m = shoal_search_options_default();
      m.k = ks[i];
      m.offset = offsets[i];
      m.filter = filters[i];
      m.nprobes = nprobes[i];
      char what[64];
      snprintf(what, sizeof what, "splits case %d", i);
      check_splits_merge(ds, q, n, dim, m, what);
      m.exact = 1;
      snprintf(what, sizeof what, "splits case %d, exact", i);
      check_splits_merge(ds, q, n, dim, m, what);
    }
    /* A failed merge still takes over (releases) its parts. */
    struct ArrowArrayStream part, merged;
    ShoalSearchOptions one_split = shoal_search_options_default();
    uint32_t first[] = {0};
    one_split.split = first;
    one_split.split_len = 1;
    CHECK_OK(shoal_search(ds, q, 2, dim, &one_split, &part, NULL));
    memset(&merged, 0, sizeof merged);
    CHECK(shoal_merge_splits(&part, 1, 0, 0, &merged) == SHOAL_STATUS_INVALID_ARGUMENT, "merge k = 0");
    CHECK(part.release == NULL && merged.release == NULL, "failed merge: parts taken, nothing written");
  }

  /* Cancellation from a second thread. */
  {
    /* The cancel is triggered while a search is under way (after one has
     * completed); that search must stop and return CANCELLED, not finish
     * (a cancel seen only when the next search starts would leave the
     * count of completed searches one higher). A search can end just as
     * the cancel comes, so up to 20 tries, one of which must land. */
    int landed = 0;
    for (int attempt = 0; attempt < 20 && !landed; attempt++) {
      Searcher s = {ds, q, n, dim, shoal_cancel_new(), SHOAL_STATUS_OK, 0, 0, 0};
      pthread_t t;
      int made = pthread_create(&t, NULL, search_until_cancelled, &s);
      CHECK(made == 0, "pthread_create failed: %d", made);
      if (made != 0) {
        shoal_cancel_free(s.cancel);
        break;
      }
      while (!(atomic_load(&s.runs) >= 1 && atomic_load(&s.in_search)) && !atomic_load(&s.done))
        sched_yield();
      int before = atomic_load(&s.runs);
      shoal_cancel_trigger(s.cancel);
      pthread_join(t, NULL);
      CHECK(s.last == SHOAL_STATUS_CANCELLED, "cancelled search returned %d (%s)", (int)s.last,
            shoal_last_error());
      landed = s.last == SHOAL_STATUS_CANCELLED && atomic_load(&s.runs) == before;
      shoal_cancel_free(s.cancel);
    }
    CHECK(landed, "no cancel stopped a search under way in 20 tries");
  }

  shoal_dataset_close(v1);
  shoal_dataset_close(ds);
  shoal_session_close(session);
  shoal_session_close(NULL);
  shoal_dataset_close(NULL);
  free(q);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("C ABI tests: all passed\n");
  return 0;
}
