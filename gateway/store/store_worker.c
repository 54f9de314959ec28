/*
 * store_worker.c: the store thread, or a pool of them (see store_worker.h).
 *
 * Two lists under one mutex: jobs to run (the threads wait on a condition
 * variable for them) and jobs run (the loop is woken through an eventfd and
 * calls their done callbacks).  The threads never call into libevent.  A
 * pool's threads each hold their own connection and take the next job as
 * they come free; one thread runs the jobs in order.
 *
 * Group commit (SQLite, store_group_begin): when a groupable job is taken
 * with another groupable one queued behind it, the thread runs them, and
 * those queued meanwhile, in one transaction, each store call a savepoint,
 * up to GROUP_JOBS jobs or GROUP_HOLD_MS of holding the write lock; one
 * commit, then every job of the group goes to the loop.  A group that
 * cannot commit is rolled back and its jobs run again, one by one, alone.
 *
 * Home loops (docs/0040 step 3): a job remembers the loop that submitted
 * it (loop_self()).  A job of the worker's own loop (the one whose base it
 * was started on, or no loop at all) ends on the done list as above; any
 * other loop's goes to that loop through its inbox (loop_call), sent by the
 * store thread that ran it, so each loop sees its answers in the order one
 * store thread ran them.  A job whose home loop has stopped is dropped
 * there onto the orphans list, whose done callbacks run only in
 * store_worker_stop, once every loop is joined.
 *
 * Keyed jobs (store_worker_submit_keyed, docs/0041): in a pool, each
 * thread also has a list of its own, the jobs whose key picks it
 * (store_worker_shard); a thread takes its own jobs and the shared ones in
 * turn.  Each thread waits on its own condition variable: a keyed job
 * wakes its thread, a shared one the first idle thread.  One thread has no
 * lists of its own: it runs every job in order anyway.
 */
#include "store_worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "loop.h"
#include "store_backend.h"

/* A group's bounds: the jobs one commit answers, and how long it holds
 * SQLite's write lock (another process's writer waits that long; the
 * first job's answer waits for the last's).  A job that alone runs longer
 * ends its group all the same, once done. */
#define GROUP_JOBS    64
#define GROUP_HOLD_MS 10

struct store_job {
	struct store_job *next;
	store_work_fn *work;
	store_done_fn *done;
	void *arg;
	bool groupable;            /* store_worker_submit_grouped's */
	struct loop *home;         /* loop_self() at submit; NULL: none */
	struct store_worker *w;    /* for the drop when home has stopped */
};

/* A singly linked FIFO; O(1) push and pop. */
struct job_list {
	struct store_job *head, *tail;
	size_t len;
};

struct store_worker;

/* One thread and its own connection. */
struct store_thread {
	struct store_worker *w;
	struct store *store;
	pthread_t thread;
	bool started;
	pthread_cond_t wake;       /* this thread's: work for it, or stopping */
	struct job_list own;       /* under mu: keyed jobs for this thread */
	bool idle;                 /* under mu: waiting, and not yet woken */
	bool took_own;             /* under mu: its last job was from own */
};

struct store_worker {
	struct store_thread *threads;
	size_t nthreads;
	pthread_mutex_t mu;
	struct job_list todo;      /* under mu: shared, any thread takes them */
	size_t owned;              /* under mu: jobs in the threads' own lists */
	struct job_list done;      /* under mu: for base's loop */
	struct job_list orphans;   /* under mu: home stopped; run at stop */
	struct event_base *base;   /* the loop done runs on (no home set) */
	size_t running;            /* threads running a job (under mu) */
	bool stopping;             /* under mu */
	size_t cap;
	size_t group_jobs;         /* under mu: a group's bounds */
	unsigned group_hold_ms;
	int efd;                   /* eventfd: done has jobs */
	struct event *ev;
};

static void
list_push(struct job_list *l, struct store_job *j)
{
	j->next = NULL;
	if (l->tail != NULL)
		l->tail->next = j;
	else
		l->head = j;
	l->tail = j;
	l->len++;
}

static struct store_job *
list_pop(struct job_list *l)
{
	struct store_job *j = l->head;

	if (j == NULL)
		return NULL;
	l->head = j->next;
	if (l->head == NULL)
		l->tail = NULL;
	l->len--;
	return j;
}

/* Takes the whole list, leaving it empty. */
static struct job_list
list_take(struct job_list *l)
{
	struct job_list all = *l;

	*l = (struct job_list){ 0 };
	return all;
}

static void
notify_loop(struct store_worker *w)
{
	uint64_t one = 1;

	/* An eventfd write fails only when the counter would overflow, and
	 * then the loop has a wake-up pending anyway. */
	while (write(w->efd, &one, sizeof(one)) == -1 && errno == EINTR)
		;
}

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* On j's home loop's thread: its answer. */
static void
job_done_home(void *arg)
{
	struct store_job *j = arg;

	j->done(j->arg);
	free(j);
}

/* j's home loop has stopped (any thread; w outlives every loop): j waits
 * for store_worker_stop, which calls its done once the loops are joined. */
static void
job_orphan(void *arg)
{
	struct store_job *j = arg;
	struct store_worker *w = j->w;

	pthread_mutex_lock(&w->mu);
	list_push(&w->orphans, j);
	pthread_mutex_unlock(&w->mu);
}

/*
 * Hands j, run, to its home (mu held): the done list when home is the
 * worker's own loop (or none), else home's inbox, with mu released
 * meanwhile (a stopped home drops j at once, and job_orphan takes mu).
 */
static void
job_answer(struct store_worker *w, struct store_job *j)
{
	if (j->home == NULL || j->home->base == w->base) {
		list_push(&w->done, j);
		return;
	}
	pthread_mutex_unlock(&w->mu);
	(void)loop_call(j->home, job_done_home, j, job_orphan);
	pthread_mutex_lock(&w->mu);
}

/* Whether th should open a group for j, the job it just took (mu held):
 * another groupable job waits behind it and its store runs groups. */
static bool
group_worth(const struct store_thread *th, const struct store_job *j)
{
	const struct store_worker *w = th->w;

	return j->groupable && w->group_jobs > 1 && w->todo.head != NULL &&
	    w->todo.head->groupable && store_group_able(th->store);
}

/*
 * Runs first and the groupable jobs queued behind it in one group on th's
 * store (see the top of the file); mu held on entry and on return, not
 * while jobs run.  Every job taken ends on the done list after the commit,
 * or after running again alone if there was none.
 */
static void
run_group(struct store_thread *th, struct store_job *first)
{
	struct store_worker *w = th->w;
	struct job_list group = { 0 };
	struct store_job *j = first;
	char err[STORE_ERROR_MAX + 1];
	double until = now_ms() + w->group_hold_ms;
	int rc;

	pthread_mutex_unlock(&w->mu);
	rc = store_group_begin(th->store, err, sizeof(err));
	pthread_mutex_lock(&w->mu);
	for (;;) {
		list_push(&group, j);
		pthread_mutex_unlock(&w->mu);
		j->work(th->store, j->arg);
		pthread_mutex_lock(&w->mu);
		if (rc != STORE_OK || group.len >= w->group_jobs ||
		    w->todo.head == NULL || !w->todo.head->groupable ||
		    now_ms() >= until || !store_group_whole(th->store))
			break;
		j = list_pop(&w->todo);
		w->running++;
	}
	pthread_mutex_unlock(&w->mu);
	/* Not begun, the first job ran alone as any other.  Not committed,
	 * every answer of the group is false: each job runs again, alone,
	 * and answers what it finds then. */
	if (rc == STORE_OK &&
	    (rc = store_group_end(th->store, err, sizeof(err))) != STORE_OK) {
		warn("store: a group of calls could not commit; each runs "
		    "again alone", KV_U("jobs", group.len), KV_S("err", err));
		for (j = group.head; j != NULL; j = j->next)
			j->work(th->store, j->arg);
	}
	pthread_mutex_lock(&w->mu);
	w->running -= group.len;
	while ((j = list_pop(&group)) != NULL)
		job_answer(w, j);
	notify_loop(w);
}

/* The next job for th (mu held): its own and the shared ones in turn
 * while both have some (neither waits behind a long run of the other),
 * else whichever has one; NULL when both are empty. */
static struct store_job *
take_next(struct store_thread *th)
{
	struct store_worker *w = th->w;
	struct store_job *j;

	if (th->own.head != NULL && (!th->took_own || w->todo.head == NULL)) {
		j = list_pop(&th->own);
		w->owned--;
		th->took_own = true;
		return j;
	}
	th->took_own = false;
	return list_pop(&w->todo);
}

static void *
worker_main(void *arg)
{
	struct store_thread *th = arg;
	struct store_worker *w = th->w;
	struct store_job *j;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (th->own.head == NULL && w->todo.head == NULL &&
		    !w->stopping) {
			th->idle = true;
			pthread_cond_wait(&th->wake, &w->mu);
			th->idle = false;
		}
		/* Stopping drains what was queued: the last state changes of
		 * sessions closed at shutdown. */
		if ((j = take_next(th)) == NULL)
			break;
		w->running++;
		if (group_worth(th, j)) {
			run_group(th, j);
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		j->work(th->store, j->arg);
		pthread_mutex_lock(&w->mu);
		w->running--;
		job_answer(w, j);
		notify_loop(w);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Calls done for every job in l, in order, and frees the nodes. */
static void
finish_all(struct job_list l)
{
	struct store_job *j;

	while ((j = list_pop(&l)) != NULL) {
		j->done(j->arg);
		free(j);
	}
}

static void
on_done(evutil_socket_t fd, short what, void *arg)
{
	struct store_worker *w = arg;
	struct job_list ready;
	uint64_t n;

	(void)what;
	if (read(fd, &n, sizeof(n)) == -1 && errno != EAGAIN)
		warn("store worker: reading its eventfd failed",
		    KV_S("err", strerror(errno)));
	pthread_mutex_lock(&w->mu);
	ready = list_take(&w->done);
	pthread_mutex_unlock(&w->mu);
	finish_all(ready);
}

int
store_worker_start(struct event_base *base, const char *url, size_t cap,
    store_timing_fn *timing, void *timing_arg, struct store_worker **out,
    char *err, size_t errlen)
{
	return store_worker_start_pool(base, url, cap, 1, timing, timing_arg,
	    out, err, errlen);
}

int
store_worker_start_pool(struct event_base *base, const char *url, size_t cap,
    size_t nthreads, store_timing_fn *timing, void *timing_arg,
    struct store_worker **out, char *err, size_t errlen)
{
	struct store_worker *w;
	int rc;

	*out = NULL;
	if (nthreads == 0)
		nthreads = 1;
	if ((w = calloc(1, sizeof(*w))) == NULL ||
	    (w->threads = calloc(nthreads, sizeof(*w->threads))) == NULL) {
		free(w);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	w->nthreads = nthreads;
	w->cap = cap;
	w->group_jobs = GROUP_JOBS;
	w->group_hold_ms = GROUP_HOLD_MS;
	w->efd = -1;
	w->base = base;
	pthread_mutex_init(&w->mu, NULL);
	for (size_t i = 0; i < nthreads; i++)
		pthread_cond_init(&w->threads[i].wake, NULL);
	for (size_t i = 0; i < nthreads; i++) {
		w->threads[i].w = w;
		if (store_open(url, &w->threads[i].store, err, errlen) != STORE_OK)
			goto fail;
		store_set_timing(w->threads[i].store, timing, timing_arg);
	}
	if ((w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1) {
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		goto fail;
	}
	w->ev = event_new(base, w->efd, EV_READ | EV_PERSIST, on_done, w);
	if (w->ev == NULL || event_add(w->ev, NULL) != 0) {
		snprintf(err, errlen, "cannot watch the store worker's eventfd");
		goto fail;
	}
	for (size_t i = 0; i < nthreads; i++) {
		if ((rc = pthread_create(&w->threads[i].thread, NULL, worker_main,
		    &w->threads[i])) != 0) {
			snprintf(err, errlen, "cannot start a store thread: %s",
			    strerror(rc));
			goto fail;
		}
		w->threads[i].started = true;
	}
	*out = w;
	return 0;
fail:
	store_worker_stop(w);
	return -1;
}

/* Wakes the first idle thread for a shared job (mu held); none idle, the
 * next to come free takes it. */
static void
wake_one(struct store_worker *w)
{
	for (size_t i = 0; i < w->nthreads; i++)
		if (w->threads[i].idle) {
			w->threads[i].idle = false;
			pthread_cond_signal(&w->threads[i].wake);
			return;
		}
}

size_t
store_worker_shard(const char *key, size_t nthreads)
{
	/* FNV-1a, 64 bits: cheap, and spreads agent ids (random) evenly. */
	uint64_t h = 14695981039346656037ULL;

	if (nthreads <= 1)
		return 0;
	for (const unsigned char *p = (const unsigned char *)key; *p != '\0'; p++) {
		h ^= *p;
		h *= 1099511628211ULL;
	}
	return (size_t)(h % nthreads);
}

/* Queues j (mu held): on the thread key picks, or shared when key is NULL
 * or w has one thread (it runs every job in order anyway). */
static void
enqueue(struct store_worker *w, struct store_job *j, const char *key)
{
	struct store_thread *th;

	if (key == NULL || w->nthreads == 1) {
		list_push(&w->todo, j);
		wake_one(w);
		return;
	}
	th = &w->threads[store_worker_shard(key, w->nthreads)];
	list_push(&th->own, j);
	w->owned++;
	if (th->idle) {
		th->idle = false;
		pthread_cond_signal(&th->wake);
	}
}

static int
submit(struct store_worker *w, const char *key, store_work_fn *work,
    store_done_fn *done, void *arg, bool groupable)
{
	struct store_job *j;

	pthread_mutex_lock(&w->mu);
	if (w->todo.len + w->owned >= w->cap || w->stopping) {
		pthread_mutex_unlock(&w->mu);
		return -1;
	}
	pthread_mutex_unlock(&w->mu);
	if ((j = calloc(1, sizeof(*j))) == NULL)
		return -1;
	j->work = work;
	j->done = done;
	j->arg = arg;
	j->groupable = groupable;
	j->home = loop_self();
	j->w = w;
	pthread_mutex_lock(&w->mu);
	enqueue(w, j, key);
	pthread_mutex_unlock(&w->mu);
	return 0;
}

int
store_worker_submit(struct store_worker *w, store_work_fn *work,
    store_done_fn *done, void *arg)
{
	return submit(w, NULL, work, done, arg, false);
}

int
store_worker_submit_grouped(struct store_worker *w, store_work_fn *work,
    store_done_fn *done, void *arg)
{
	return submit(w, NULL, work, done, arg, true);
}

int
store_worker_submit_keyed(struct store_worker *w, const char *key,
    bool groupable, store_work_fn *work, store_done_fn *done, void *arg)
{
	return submit(w, key, work, done, arg, groupable);
}

void
store_worker_set_group(struct store_worker *w, size_t max_jobs,
    unsigned hold_ms)
{
	pthread_mutex_lock(&w->mu);
	w->group_jobs = max_jobs;
	w->group_hold_ms = hold_ms;
	pthread_mutex_unlock(&w->mu);
}

size_t
store_worker_threads(const struct store_worker *w)
{
	return w->nthreads;
}

size_t
store_worker_pending(const struct store_worker *w)
{
	size_t n;

	pthread_mutex_lock((pthread_mutex_t *)&w->mu);
	n = w->todo.len + w->owned + w->running + w->done.len;
	pthread_mutex_unlock((pthread_mutex_t *)&w->mu);
	return n;
}

void
store_worker_stop(struct store_worker *w)
{
	if (w == NULL)
		return;
	pthread_mutex_lock(&w->mu);
	w->stopping = true;
	for (size_t i = 0; i < w->nthreads; i++)
		pthread_cond_signal(&w->threads[i].wake);
	pthread_mutex_unlock(&w->mu);
	for (size_t i = 0; i < w->nthreads; i++)
		if (w->threads[i].started)
			pthread_join(w->threads[i].thread, NULL);
	/* The threads ran every job (or none started: none ran). */
	finish_all(list_take(&w->done));
	finish_all(list_take(&w->orphans));
	finish_all(list_take(&w->todo));
	for (size_t i = 0; i < w->nthreads; i++)
		finish_all(list_take(&w->threads[i].own));
	if (w->ev != NULL)
		event_free(w->ev);
	if (w->efd != -1)
		close(w->efd);
	for (size_t i = 0; i < w->nthreads; i++) {
		store_close(w->threads[i].store);
		pthread_cond_destroy(&w->threads[i].wake);
	}
	free(w->threads);
	pthread_mutex_destroy(&w->mu);
	free(w);
}
