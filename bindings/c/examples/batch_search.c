/* A worked example for a database engine: one pinned snapshot, a batch of
 * query vectors, the snapshot cut into splits that separate workers search
 * (here one after another), the split results merged per query, and the
 * rows read out of the Arrow C stream. Compiles as C11 or C++.
 *
 *   make example            # builds it and runs it on the test fixture
 *   ./build/batch_search DATASET_PATH_OR_URL
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shoal.h"

/* Prints the status and message of a failed call and exits. */
static void check(ShoalStatus status, const char *what) {
  if (status != SHOAL_STATUS_OK) {
    fprintf(stderr, "%s failed (status %d): %s\n", what, (int)status, shoal_last_error());
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DATASET\n", argv[0]);
    return 2;
  }
  /* One session per process: caches and scan threads shared by datasets. */
  ShoalSession *session = NULL;
  check(shoal_session_open(NULL, &session), "shoal_session_open");

  /* Pin the latest version: every split below sees the same snapshot. */
  ShoalDataset *ds = NULL;
  check(shoal_dataset_open(session, argv[1], -1, &ds), "shoal_dataset_open");
  printf("version %llu, %llu rows\n", (unsigned long long)shoal_dataset_version(ds),
         (unsigned long long)shoal_dataset_count_rows(ds));

  /* Two query vectors (the fixture's dimension is 16); the engine owns
   * this memory, shoal copies it during the call. */
  enum { N = 2, DIM = 16 };
  float queries[N * DIM];
  for (int i = 0; i < N * DIM; i++) queries[i] = (float)((i * 7) % 11) * 0.1f - 0.5f;

  /* The plan: top 5 after skipping 1, per query, where category = 'noun'. */
  ShoalSearchOptions options = shoal_search_options_default();
  options.k = 5;
  options.offset = 1;
  options.filter = "category = 'noun'";
  options.nprobes = 8;

  /* Splits: one per index segment, one per unindexed fragment. */
  ShoalSplitList *splits = NULL;
  check(shoal_dataset_splits(ds, NULL, &splits), "shoal_dataset_splits");
  struct ArrowArrayStream *parts =
      (struct ArrowArrayStream *)calloc(splits->count, sizeof(struct ArrowArrayStream));
  for (size_t s = 0; s < splits->count; s++) {
    /* Each worker searches its split: k + offset rows per query, so that
     * the merge can page. */
    ShoalSearchOptions split = options;
    split.split = splits->splits[s].fragment_ids;
    split.split_len = splits->splits[s].fragment_count;
    check(shoal_search(ds, queries, N, DIM, &split, &parts[s], NULL), "shoal_search (split)");
    printf("split %zu: %zu fragment(s), %llu rows, %s\n", s, splits->splits[s].fragment_count,
           (unsigned long long)splits->splits[s].rows,
           splits->splits[s].indexed ? "indexed" : "scanned exactly");
  }

  /* The merge takes the part streams over and applies k and offset per
   * query: the same rows as one search of the whole snapshot. */
  struct ArrowArrayStream merged;
  check(shoal_merge_splits(parts, splits->count, options.k, options.offset, &merged),
        "shoal_merge_splits");
  free(parts);
  shoal_split_list_free(splits);

  /* Read the rows: columns 0, 1, 2 are _query_index, _rowid, _distance. */
  struct ArrowSchema schema;
  if (merged.get_schema(&merged, &schema) != 0) return 1;
  for (;;) {
    struct ArrowArray batch;
    if (merged.get_next(&merged, &batch) != 0) {
      fprintf(stderr, "stream: %s\n", merged.get_last_error(&merged));
      return 1;
    }
    if (batch.release == NULL) break; /* end of stream */
    const uint32_t *query = (const uint32_t *)batch.children[0]->buffers[1];
    const uint64_t *rowid = (const uint64_t *)batch.children[1]->buffers[1];
    const float *distance = (const float *)batch.children[2]->buffers[1];
    for (int64_t i = 0; i < batch.length; i++) {
      int64_t at = batch.offset + i;
      printf("query %u  row %llu (fragment %llu)  distance %.4f\n",
             query[batch.children[0]->offset + at],
             (unsigned long long)rowid[batch.children[1]->offset + at],
             (unsigned long long)(rowid[batch.children[1]->offset + at] >> 32),
             distance[batch.children[2]->offset + at]);
    }
    batch.release(&batch);
  }
  schema.release(&schema);
  merged.release(&merged);

  /* EXPLAIN: the profile of one whole-snapshot search, as JSON. */
  struct ArrowArrayStream whole;
  char *explain = NULL;
  check(shoal_search(ds, queries, N, DIM, &options, &whole, &explain), "shoal_search (explain)");
  printf("explain: %s\n", explain);
  shoal_string_free(explain);
  whole.release(&whole);

  shoal_dataset_close(ds);
  shoal_session_close(session);
  return 0;
}
