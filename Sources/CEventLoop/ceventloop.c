#if defined(__linux__)
#define _GNU_SOURCE // ppoll
#endif
#include "ceventloop.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/epoll.h>
#include <sys/eventfd.h>

static uint32_t epoll_interest(int interest) {
    uint32_t events = 0;
    if (interest & BB_INTEREST_READ) events |= EPOLLIN | EPOLLRDHUP;
    if (interest & BB_INTEREST_WRITE) events |= EPOLLOUT;
    return events;
}

int bb_poller_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int bb_poller_add(int poller, int fd, int interest, uint64_t token) {
    struct epoll_event event = { .events = epoll_interest(interest), .data.u64 = token };
    return epoll_ctl(poller, EPOLL_CTL_ADD, fd, &event);
}

int bb_poller_modify(int poller, int fd, int interest, uint64_t token) {
    struct epoll_event event = { .events = epoll_interest(interest), .data.u64 = token };
    return epoll_ctl(poller, EPOLL_CTL_MOD, fd, &event);
}

int bb_poller_remove(int poller, int fd) {
    struct epoll_event event = { 0 };
    return epoll_ctl(poller, EPOLL_CTL_DEL, fd, &event);
}

int bb_poller_wait(int poller, bb_event *events, int capacity, int timeout_ms) {
    struct epoll_event raw[64];
    if (capacity > 64) capacity = 64;
    int count;
    do {
        count = epoll_wait(poller, raw, capacity, timeout_ms);
    } while (count < 0 && errno == EINTR);
    for (int i = 0; i < count; i++) {
        events[i].token = raw[i].data.u64;
        events[i].readable = (raw[i].events & (EPOLLIN | EPOLLPRI)) != 0;
        events[i].writable = (raw[i].events & EPOLLOUT) != 0;
        events[i].failed = (raw[i].events & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) != 0;
    }
    return count;
}

int bb_wakeup_create(int *write_end) {
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    *write_end = fd;
    return fd;
}

void bb_wakeup_signal(int write_end) {
    uint64_t one = 1;
    ssize_t written;
    do { written = write(write_end, &one, sizeof one); } while (written < 0 && errno == EINTR);
}

void bb_wakeup_drain(int read_end) {
    uint64_t value;
    ssize_t got;
    do { got = read(read_end, &value, sizeof value); } while (got < 0 && errno == EINTR);
}

#elif defined(__APPLE__)
#include <sys/event.h>
#include <sys/time.h>

int bb_poller_create(void) {
    int fd = kqueue();
    if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

static int kqueue_apply(int poller, int fd, int interest, uint64_t token) {
    struct kevent changes[2];
    EV_SET(&changes[0], fd, EVFILT_READ, (interest & BB_INTEREST_READ) ? EV_ADD | EV_ENABLE : EV_ADD | EV_DISABLE, 0, 0, (void *)(uintptr_t)token);
    EV_SET(&changes[1], fd, EVFILT_WRITE, (interest & BB_INTEREST_WRITE) ? EV_ADD | EV_ENABLE : EV_ADD | EV_DISABLE, 0, 0, (void *)(uintptr_t)token);
    return kevent(poller, changes, 2, NULL, 0, NULL) < 0 ? -1 : 0;
}

int bb_poller_add(int poller, int fd, int interest, uint64_t token) { return kqueue_apply(poller, fd, interest, token); }
int bb_poller_modify(int poller, int fd, int interest, uint64_t token) { return kqueue_apply(poller, fd, interest, token); }

int bb_poller_remove(int poller, int fd) {
    struct kevent changes[2];
    EV_SET(&changes[0], fd, EVFILT_READ, EV_DELETE, 0, 0, NULL);
    EV_SET(&changes[1], fd, EVFILT_WRITE, EV_DELETE, 0, 0, NULL);
    kevent(poller, changes, 2, NULL, 0, NULL);
    return 0;
}

int bb_poller_wait(int poller, bb_event *events, int capacity, int timeout_ms) {
    struct kevent raw[64];
    if (capacity > 64) capacity = 64;
    struct timespec timeout = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L };
    int count;
    do {
        count = kevent(poller, NULL, 0, raw, capacity, timeout_ms < 0 ? NULL : &timeout);
    } while (count < 0 && errno == EINTR);
    for (int i = 0; i < count; i++) {
        events[i].token = (uint64_t)(uintptr_t)raw[i].udata;
        events[i].readable = raw[i].filter == EVFILT_READ;
        events[i].writable = raw[i].filter == EVFILT_WRITE;
        events[i].failed = (raw[i].flags & (EV_EOF | EV_ERROR)) != 0;
    }
    return count;
}

int bb_wakeup_create(int *write_end) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    *write_end = fds[1];
    return fds[0];
}

void bb_wakeup_signal(int write_end) {
    char one = 1;
    ssize_t written;
    do { written = write(write_end, &one, 1); } while (written < 0 && errno == EINTR);
}

void bb_wakeup_drain(int read_end) {
    char buffer[64];
    while (read(read_end, buffer, sizeof buffer) > 0) {}
}
#else
#error "the event loop supports Linux (epoll) and macOS (kqueue)"
#endif

int bb_close(int fd) { return close(fd); }

int bb_wait_readable(int fd, int wake_fd, int64_t timeout_ns) {
    struct pollfd watched[2] = { { .fd = fd, .events = POLLIN }, { .fd = wake_fd, .events = POLLIN } };
    int count;
#if defined(__linux__)
    struct timespec timeout = { (time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000) };
    do { count = ppoll(watched, 2, &timeout, NULL); } while (count < 0 && errno == EINTR);
#else
    int timeout_ms = (int)((timeout_ns + 999999) / 1000000);
    do { count = poll(watched, 2, timeout_ms); } while (count < 0 && errno == EINTR);
#endif
    if (count < 0) return -1;
    if (watched[0].revents & (POLLERR | POLLHUP | POLLNVAL)) return 2;
    if (watched[0].revents & POLLIN) return 1;
    if (watched[1].revents) return 3;
    return 0;
}

// One offer per thread: a thread hops one task at a time.
static _Thread_local const void *offered_loop;
static _Thread_local const void *offered_task;

void bb_offer_set(const void *loop, const void *task) {
    offered_loop = loop;
    offered_task = task;
}

int bb_offer_take(const void *loop, const void *job) {
    int matches = offered_loop != NULL && offered_loop == loop && offered_task == job;
    offered_loop = NULL;
    offered_task = NULL;
    return matches;
}

static _Thread_local int is_loop_thread;

void bb_mark_loop_thread(void) { is_loop_thread = 1; }

int bb_is_loop_thread(void) { return is_loop_thread; }
