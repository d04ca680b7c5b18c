/* allreduce_check: MPI collectives whose every result element is checked against the value
 * computed locally, for the libfabric provider's end-to-end tests (tests/ofi/fabric_test.py).
 *
 *   MPI_Allreduce (MPI_SUM, doubles) over sizes from 1 element to MAX_ELEMS, ITERS times each,
 *     rank r's element i of iteration k being an integer-valued double (exact sums, any order)
 *   MPI_Bcast of MAX_ELEMS doubles from each root in turn
 *   MPI_Alltoall of BLOCK doubles per pair, each element naming its sender, receiver and index
 *
 * usage: allreduce_check [ITERS [MAX_ELEMS]]   (defaults 3 and 1048576)
 * Rank 0 prints one line: "allreduce_check: ranks N checks C errors E (allreduce A, bcast B,
 * alltoall T) in S s"; exit 0 when no rank saw an error, 1 otherwise (and 2 on a bad argument).
 * A rank prints its first few wrong elements (rank, operation, size, index, got, expected).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define ALLTOALL_BLOCK 4096
#define REPORT_LIMIT 5

static long long reported;

/* Element i of rank r's contribution in iteration k: an integer < 2^31, so that every sum over
 * a few ranks is exact in a double whatever the reduction order. */
static double contribution(int r, long long i, int k) {
  return (double)(((uint64_t)i * 2654435761u + (uint64_t)r * 40503u + (uint64_t)k * 977u) %
                  1000003u);
}

static long long check(int rank, const char* op, long long n, long long i, double got,
                       double want) {
  if (got == want) return 0;
  if (reported++ < REPORT_LIMIT)
    fprintf(stderr, "allreduce_check: rank %d %s n=%lld index %lld: got %.17g, expected %.17g\n",
            rank, op, n, i, got, want);
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iters = argc > 1 ? atoi(argv[1]) : 3;
  long long max_elems = argc > 2 ? atoll(argv[2]) : 1048576;
  if (iters < 1 || max_elems < 1) {
    if (rank == 0) fprintf(stderr, "usage: allreduce_check [ITERS [MAX_ELEMS]]\n");
    MPI_Finalize();
    return 2;
  }
  double* send = malloc(sizeof(double) * max_elems);
  double* recv = malloc(sizeof(double) * max_elems);
  double* a2a_send = malloc(sizeof(double) * ALLTOALL_BLOCK * size);
  double* a2a_recv = malloc(sizeof(double) * ALLTOALL_BLOCK * size);
  if (!send || !recv || !a2a_send || !a2a_recv) {
    fprintf(stderr, "allreduce_check: rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  long long checks[3] = {0, 0, 0}, errors[3] = {0, 0, 0};
  double t0 = MPI_Wtime();

  /* Sizes 1, 7, 64, 1000, 8192, 65536, 300000 (within bounds), then max_elems: eager messages,
   * rendezvous, and Open MPI's several allreduce algorithms. */
  static const long long sizes[] = {1, 7, 64, 1000, 8192, 65536, 300000};
  long long plan[9];
  int nplan = 0;
  for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
    if (sizes[s] < max_elems) plan[nplan++] = sizes[s];
  plan[nplan++] = max_elems;

  for (int p = 0; p < nplan; p++) {
    long long n = plan[p];
    for (int k = 0; k < iters; k++) {
      for (long long i = 0; i < n; i++) {
        send[i] = contribution(rank, i, k);
        recv[i] = -1.0;
      }
      MPI_Allreduce(send, recv, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      for (long long i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < size; r++) want += contribution(r, i, k);
        errors[0] += check(rank, "allreduce", n, i, recv[i], want);
      }
      checks[0] += n;
    }
  }

  for (int root = 0; root < size; root++) {
    for (long long i = 0; i < max_elems; i++)
      send[i] = rank == root ? contribution(root, i, 7) : -1.0;
    MPI_Bcast(send, (int)max_elems, MPI_DOUBLE, root, MPI_COMM_WORLD);
    for (long long i = 0; i < max_elems; i++)
      errors[1] += check(rank, "bcast", max_elems, i, send[i], contribution(root, i, 7));
    checks[1] += max_elems;
  }

  for (int k = 0; k < iters; k++) {
    for (int to = 0; to < size; to++)
      for (int i = 0; i < ALLTOALL_BLOCK; i++) {
        a2a_send[(long long)to * ALLTOALL_BLOCK + i] =
            (double)(((rank * 1000 + to) * ALLTOALL_BLOCK + i) * 4 + k);
        a2a_recv[(long long)to * ALLTOALL_BLOCK + i] = -1.0;
      }
    MPI_Alltoall(a2a_send, ALLTOALL_BLOCK, MPI_DOUBLE, a2a_recv, ALLTOALL_BLOCK, MPI_DOUBLE,
                 MPI_COMM_WORLD);
    for (int from = 0; from < size; from++)
      for (int i = 0; i < ALLTOALL_BLOCK; i++)
        errors[2] += check(rank, "alltoall", ALLTOALL_BLOCK, (long long)from * ALLTOALL_BLOCK + i,
                           a2a_recv[(long long)from * ALLTOALL_BLOCK + i],
                           (double)(((from * 1000 + rank) * ALLTOALL_BLOCK + i) * 4 + k));
    checks[2] += (long long)ALLTOALL_BLOCK * size;
  }

  long long all_checks[3], all_errors[3];
  MPI_Reduce(checks, all_checks, 3, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(errors, all_errors, 3, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  long long local_errors = errors[0] + errors[1] + errors[2], any_errors = 0;
  MPI_Allreduce(&local_errors, &any_errors, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  double seconds = MPI_Wtime() - t0;
  if (rank == 0)
    printf("allreduce_check: ranks %d checks %lld errors %lld (allreduce %lld/%lld, bcast "
           "%lld/%lld, alltoall %lld/%lld errors/checks) in %.2f s\n",
           size, all_checks[0] + all_checks[1] + all_checks[2],
           all_errors[0] + all_errors[1] + all_errors[2], all_errors[0], all_checks[0],
           all_errors[1], all_checks[1], all_errors[2], all_checks[2], seconds);
  fflush(stdout);
  free(send);
  free(recv);
  free(a2a_send);
  free(a2a_recv);
  MPI_Finalize();
  return any_errors != 0 ? 1 : 0;
}
