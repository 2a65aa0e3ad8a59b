/*
 * librdkafka's own price per record, with no Python (bench/batch.py --floor, side `c`): the client's floor
 * of bench/batch.py (consume in batches of 2,000, read each record, produce the filter's 3 in 5 as read or one
 * fixed value per input for the totals, nothing decoded) written against librdkafka in C, with the worker's
 * client settings. What any binding of this client pays at least, its threads included.
 *
 * Usage: floor BOOTSTRAP TOPIC_IN TOPIC_OUT RECORDS filter|totals; prints RESULT {"rate", "cpu_us"}.
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

static long delivered = 0, failed = 0;
static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *o) {
    if (m->err) failed++; else delivered++;
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static double cpu(void) { struct rusage r; getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6; }
static void set(rd_kafka_conf_t *c, const char *k, const char *v) {
    char err[512];
    if (rd_kafka_conf_set(c, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) fprintf(stderr, "conf %s: %s\n", k, err);
}
int main(int argc, char **argv) {
    const char *bootstrap = argv[1], *in = argv[2], *out = argv[3];
    long n = atol(argv[4]);
    int totals = strcmp(argv[5], "totals") == 0;
    char err[512], group[64];
    snprintf(group, sizeof group, "cfloor-%ld", (long)time(NULL) ^ (long)getpid());
    rd_kafka_conf_t *cc = rd_kafka_conf_new();
    set(cc, "bootstrap.servers", bootstrap); set(cc, "group.id", group);
    set(cc, "enable.auto.commit", "false"); set(cc, "enable.auto.offset.store", "false");
    set(cc, "auto.offset.reset", "earliest"); set(cc, "partition.assignment.strategy", "cooperative-sticky");
    set(cc, "fetch.wait.max.ms", "20"); set(cc, "fetch.queue.backoff.ms", "10"); set(cc, "queued.min.messages", "10000");
    set(cc, "isolation.level", "read_committed"); set(cc, "enable.partition.eof", "true");
    rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, cc, err, sizeof err);
    rd_kafka_conf_t *pc = rd_kafka_conf_new();
    set(pc, "bootstrap.servers", bootstrap); set(pc, "enable.idempotence", "true"); set(pc, "acks", "all");
    set(pc, "linger.ms", "5"); set(pc, "compression.type", "lz4"); set(pc, "partitioner", "murmur2_random");
    set(pc, "queue.buffering.max.messages", "500000"); set(pc, "delivery.report.only.error", "true");
    rd_kafka_conf_set_dr_msg_cb(pc, dr_cb);
    rd_kafka_t *p = rd_kafka_new(RD_KAFKA_PRODUCER, pc, err, sizeof err);
    rd_kafka_poll_set_consumer(c);
    rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(subs, in, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(c, subs);
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(c);
    rd_kafka_message_t **msgs = malloc(sizeof(*msgs) * 2000);
    const char fixed[] = "{\"key\":\"k0\",\"count\":1,\"sum\":0.5}";
    long seen = 0; double t0 = 0, c0 = 0;
    while (seen < n) {
        ssize_t got = rd_kafka_consume_batch_queue(q, 100, msgs, 2000);
        if (got <= 0) { rd_kafka_poll(p, 0); continue; }
        if (!t0) { t0 = now(); c0 = cpu(); }
        for (ssize_t i = 0; i < got; i++) {
            rd_kafka_message_t *m = msgs[i];
            if (!m->err) {
                if (totals || m->offset % 5 < 3) {
                    rd_kafka_timestamp_type_t tt; int64_t ts = rd_kafka_message_timestamp(m, &tt);
                    for (;;) {
                        rd_kafka_resp_err_t e = rd_kafka_producev(p, RD_KAFKA_V_TOPIC(out),
                            RD_KAFKA_V_VALUE(totals ? (void *)fixed : m->payload, totals ? sizeof fixed - 1 : m->len),
                            RD_KAFKA_V_KEY(m->key, m->key_len), RD_KAFKA_V_TIMESTAMP(ts),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
                        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) { rd_kafka_poll(p, 50); continue; }
                        if (e) { fprintf(stderr, "produce: %s\n", rd_kafka_err2str(e)); return 1; }
                        break;
                    }
                }
                seen++;
            }
            rd_kafka_message_destroy(m);
        }
        rd_kafka_poll(p, 0);
    }
    rd_kafka_flush(p, 60000);
    double el = now() - t0, cp = cpu() - c0;
    printf("RESULT {\"rate\": %.0f, \"cpu_us\": %.3f, \"failed\": %ld}\n", n / el, cp / n * 1e6, failed);
    rd_kafka_consumer_close(c);
    return 0;
}
