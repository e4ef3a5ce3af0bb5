/* threads_send_records: several threads write fixed-size tagged records on one socket (a
 * mutex around each full write); the receiver gets every record intact, and each thread's
 * records in the order that thread wrote them. */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define THREADS 3
#define RECORDS 20000

struct record {
	uint32_t thread;
	uint32_t seq;
	unsigned char payload[48];
	uint64_t check;
};

static int c;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t record_check(const struct record *r)
{
	return pattern_word(r->thread, r->seq) ^ ((uint64_t)r->thread << 32 | r->seq);
}

static void *sender(void *arg)
{
	struct record r;

	r.thread = (uint32_t)(uintptr_t)arg;
	for (uint32_t i = 0; i < RECORDS; i++) {
		r.seq = i;
		pattern_fill(100 + r.thread, (uint64_t)i * sizeof(r.payload), r.payload,
			     sizeof(r.payload));
		r.check = record_check(&r);
		CHECK(pthread_mutex_lock(&lock), ==, 0);
		xwrite_all(c, &r, sizeof(r));
		CHECK(pthread_mutex_unlock(&lock), ==, 0);
	}
	return NULL;
}

int main(void)
{
	uint32_t next[THREADS] = { 0 };
	pthread_t th[THREADS];
	struct record r;
	int s;

	CHECK(sizeof(struct record), ==, 64);
	tcp_pair_checked(AF_INET, &c, &s);
	for (uintptr_t i = 0; i < THREADS; i++)
		CHECK(pthread_create(&th[i], NULL, sender, (void *)i), ==, 0);

	for (long n = 0; n < (long)THREADS * RECORDS; n++) {
		xread_exact(s, &r, sizeof(r));
		if (r.thread >= THREADS)
			FAIL("record %ld: thread tag %u (stream corrupt)", n, r.thread);
		CHECK(r.seq, ==, next[r.thread]);
		CHECK(r.check, ==, record_check(&r));
		CHECK_PATTERN(100 + r.thread, (uint64_t)r.seq * sizeof(r.payload), r.payload,
			      sizeof(r.payload));
		next[r.thread]++;
	}
	for (int i = 0; i < THREADS; i++) {
		CHECK(pthread_join(th[i], NULL), ==, 0);
		CHECK(next[i], ==, RECORDS);
	}
	CHECK_OK(shutdown(c, SHUT_WR));
	CHECK(read(s, &r, 1), ==, 0);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
