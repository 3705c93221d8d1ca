/*
 * The floor: the benchmark cases written directly against libpq, the way a careful C
 * programmer would (prepared statements, binary results, pipeline mode, COPY).
 *
 *   bench-clibpq roundtrip CONNINFO N
 *   bench-clibpq roundtrip-params CONNINFO N   (no prepared statement: PQexecParams)
 *   bench-clibpq decode    CONNINFO
 *   bench-clibpq insert    CONNINFO N CHILD_UUID USER_UUID (sequential|pipeline|copy)
 *
 * Prints one JSON object: {"seconds": S, "count": N, "p50_us": X, "p99_us": Y}.
 */
#include <libpq-fe.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(PGconn *conn, const char *what) {
    fprintf(stderr, "bench-clibpq: %s: %s\n", what, PQerrorMessage(conn));
    exit(1);
}

static void report(double seconds, long count, double *latencies, long n) {
    double p50 = 0, p99 = 0;
    if (n > 0) {
        qsort(latencies, (size_t)n, sizeof(double), compare_doubles);
        p50 = latencies[n / 2] * 1e6;
        p99 = latencies[(long)((double)(n - 1) * 0.99)] * 1e6;
    }
    printf("{\"seconds\": %.6f, \"count\": %ld, \"p50_us\": %.3f, \"p99_us\": %.3f}\n", seconds, count, p50, p99);
}

static void roundtrip(PGconn *conn, long n) {
    PGresult *prepared = PQprepare(conn, "rt", "SELECT $1::int4", 1, NULL);
    if (PQresultStatus(prepared) != PGRES_COMMAND_OK) die(conn, "prepare");
    PQclear(prepared);
    double *latencies = malloc(sizeof(double) * (size_t)n);
    double start = now_seconds();
    for (long i = 0; i < n; i++) {
        double t0 = now_seconds();
        uint32_t value = htonl((uint32_t)i);
        const char *values[1] = {(const char *)&value};
        int lengths[1] = {4}, formats[1] = {1};
        PGresult *result = PQexecPrepared(conn, "rt", 1, values, lengths, formats, 1);
        if (PQresultStatus(result) != PGRES_TUPLES_OK) die(conn, "roundtrip");
        uint32_t got;
        memcpy(&got, PQgetvalue(result, 0, 0), 4);
        if ((long)ntohl(got) != i) die(conn, "wrong value");
        PQclear(result);
        latencies[i] = now_seconds() - t0;
    }
    report(now_seconds() - start, n, latencies, n);
    free(latencies);
}

/* The statement cache's off switch, in C: each statement one PQexecParams exchange (unnamed
 * Parse/Bind/Describe/Execute/Sync), binary parameter, text result. */
static void roundtrip_params(PGconn *conn, long n) {
    double *latencies = malloc(sizeof(double) * (size_t)n);
    double start = now_seconds();
    for (long i = 0; i < n; i++) {
        double t0 = now_seconds();
        uint32_t value = htonl((uint32_t)i);
        const char *values[1] = {(const char *)&value};
        int lengths[1] = {4}, formats[1] = {1};
        Oid types[1] = {23};
        PGresult *result = PQexecParams(conn, "SELECT $1::int4", 1, types, values, lengths, formats, 0);
        if (PQresultStatus(result) != PGRES_TUPLES_OK) die(conn, "roundtrip-params");
        if (atol(PQgetvalue(result, 0, 0)) != i) die(conn, "wrong value");
        PQclear(result);
        latencies[i] = now_seconds() - t0;
    }
    report(now_seconds() - start, n, latencies, n);
    free(latencies);
}

struct row {
    unsigned char id[16];
    int64_t at;
    char label[64];
    int64_t n;
    char *doc;
    double x;
};

static uint64_t read_u64(const char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return ((uint64_t)ntohl((uint32_t)v) << 32) | ntohl((uint32_t)(v >> 32));
}

static void decode(PGconn *conn) {
    double start = now_seconds();
    PGresult *result = PQexecParams(conn, "SELECT id, at, label, n, doc, x FROM bench_rows", 0, NULL, NULL, NULL, NULL, 1);
    if (PQresultStatus(result) != PGRES_TUPLES_OK) die(conn, "decode");
    int rows = PQntuples(result);
    struct row *out = calloc((size_t)rows, sizeof(struct row));
    for (int r = 0; r < rows; r++) {
        memcpy(out[r].id, PQgetvalue(result, r, 0), 16);
        out[r].at = (int64_t)read_u64(PQgetvalue(result, r, 1));
        int length = PQgetlength(result, r, 2);
        memcpy(out[r].label, PQgetvalue(result, r, 2), length < 63 ? (size_t)length : 63);
        out[r].n = (int64_t)read_u64(PQgetvalue(result, r, 3));
        int doc_length = PQgetlength(result, r, 4);
        out[r].doc = malloc((size_t)doc_length);
        memcpy(out[r].doc, PQgetvalue(result, r, 4) + 1, (size_t)doc_length - 1); /* skip jsonb version */
        uint64_t bits = read_u64(PQgetvalue(result, r, 5));
        memcpy(&out[r].x, &bits, 8);
    }
    PQclear(result);
    double seconds = now_seconds() - start;
    for (int r = 0; r < rows; r++) free(out[r].doc);
    free(out);
    report(seconds, rows, NULL, 0);
}

static const char *insert_sql =
    "INSERT INTO events (id, child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data) "
    "VALUES ($1::uuid, $2::uuid, $3::uuid, 'diaper', $4::timestamptz, 'UTC', 0, '{\"contents\":\"wet\"}')";

static void make_uuid(char *out, long i) {
    snprintf(out, 37, "%08lx-0000-4000-8000-%012lx", (unsigned long)(i >> 16), (unsigned long)i);
}

static void insert(PGconn *conn, long n, const char *child, const char *user, const char *mode, long salt) {
    char id[40], at[40];
    double start = now_seconds();
    if (strcmp(mode, "copy") == 0) {
        PGresult *result = PQexec(conn, "COPY events (id, child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data) FROM STDIN");
        if (PQresultStatus(result) != PGRES_COPY_IN) die(conn, "copy start");
        PQclear(result);
        char line[512];
        for (long i = 0; i < n; i++) {
            make_uuid(id, salt + i);
            int length = snprintf(line, sizeof line, "%s\t%s\t%s\tdiaper\t2025-01-01 00:00:00+00\tUTC\t0\t{\"contents\":\"wet\"}\n", id, child, user);
            if (PQputCopyData(conn, line, length) != 1) die(conn, "copy data");
        }
        if (PQputCopyEnd(conn, NULL) != 1) die(conn, "copy end");
        result = PQgetResult(conn);
        if (PQresultStatus(result) != PGRES_COMMAND_OK) die(conn, "copy");
        PQclear(result);
        while ((result = PQgetResult(conn))) PQclear(result);
        report(now_seconds() - start, n, NULL, 0);
        return;
    }
    PGresult *prepared = PQprepare(conn, "ins", insert_sql, 4, NULL);
    if (PQresultStatus(prepared) != PGRES_COMMAND_OK) die(conn, "prepare insert");
    PQclear(prepared);
    start = now_seconds();
    int pipeline = strcmp(mode, "pipeline") == 0;
    if (pipeline && PQenterPipelineMode(conn) != 1) die(conn, "pipeline");
    long sent = 0, received = 0;
    while (received < n) {
        long end = pipeline ? (sent + 256 < n ? sent + 256 : n) : sent + 1;
        for (; sent < end; sent++) {
            make_uuid(id, salt + sent);
            snprintf(at, sizeof at, "2025-01-01 00:00:%02ld+00", sent % 60);
            const char *values[4] = {id, child, user, at};
            if (pipeline) {
                if (PQsendQueryPrepared(conn, "ins", 4, values, NULL, NULL, 0) != 1) die(conn, "send");
            } else {
                PGresult *result = PQexecPrepared(conn, "ins", 4, values, NULL, NULL, 0);
                if (PQresultStatus(result) != PGRES_COMMAND_OK) die(conn, "insert");
                PQclear(result);
                received++;
            }
        }
        if (!pipeline) continue;
        if ((sent == n ? PQpipelineSync(conn) : PQsendFlushRequest(conn)) != 1 || PQflush(conn) != 0) die(conn, "flush");
        for (; received < sent; received++) {
            PGresult *result = PQgetResult(conn);
            if (!result || PQresultStatus(result) != PGRES_COMMAND_OK) die(conn, "pipelined insert");
            PQclear(result);
            while ((result = PQgetResult(conn))) PQclear(result);
        }
    }
    if (pipeline) {
        PGresult *result;
        while ((result = PQgetResult(conn))) {
            int done = PQresultStatus(result) == PGRES_PIPELINE_SYNC;
            PQclear(result);
            if (done) break;
        }
        if (PQexitPipelineMode(conn) != 1) die(conn, "exit pipeline");
    }
    report(now_seconds() - start, n, NULL, 0);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench-clibpq roundtrip|roundtrip-params|decode|insert CONNINFO ...\n");
        return 2;
    }
    PGconn *conn = PQconnectdb(argv[2]);
    if (PQstatus(conn) != CONNECTION_OK) die(conn, "connect");
    if (strcmp(argv[1], "roundtrip") == 0 && argc >= 4) roundtrip(conn, atol(argv[3]));
    else if (strcmp(argv[1], "roundtrip-params") == 0 && argc >= 4) roundtrip_params(conn, atol(argv[3]));
    else if (strcmp(argv[1], "decode") == 0) decode(conn);
    else if (strcmp(argv[1], "insert") == 0 && argc >= 8) insert(conn, atol(argv[3]), argv[4], argv[5], argv[6], atol(argv[7]));
    else { fprintf(stderr, "bench-clibpq: bad arguments\n"); return 2; }
    PQfinish(conn);
    return 0;
}
