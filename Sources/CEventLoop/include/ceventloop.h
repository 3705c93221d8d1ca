// The readiness notification the Postgres module's event loop needs, over epoll (Linux) or
// kqueue (macOS), in a shape Swift can call (epoll_event is a packed struct on x86_64).
#ifndef CEVENTLOOP_H
#define CEVENTLOOP_H

#include <stdint.h>

enum {
    BB_INTEREST_READ = 1,
    BB_INTEREST_WRITE = 2,
};

typedef struct {
    uint64_t token;
    int readable;
    int writable;
    /// The peer hung up or the socket has an error.
    int failed;
} bb_event;

/// A new poller (epoll or kqueue descriptor), or -1 with errno.
int bb_poller_create(void);
/// Watches `fd` for `interest` (BB_INTEREST_* bits), reporting `token`. 0 or -1 with errno.
int bb_poller_add(int poller, int fd, int interest, uint64_t token);
int bb_poller_modify(int poller, int fd, int interest, uint64_t token);
int bb_poller_remove(int poller, int fd);
/// Waits up to `timeout_ms` (-1: forever) and fills `events`; the count, or -1 with errno.
int bb_poller_wait(int poller, bb_event *events, int capacity, int timeout_ms);

/// A descriptor another thread can make readable to wake the poller (eventfd or a pipe).
/// Returns the descriptor to watch; `write_end` receives the one to signal.
int bb_wakeup_create(int *write_end);
void bb_wakeup_signal(int write_end);
void bb_wakeup_drain(int read_end);

/// The calling thread's offer to run one job of a loop itself: `task` is about to hop onto
/// `loop` (both as opaque pointers). Set just before the hop; the loop's enqueue takes it.
void bb_offer_set(const void *loop, const void *task);
/// Takes the calling thread's offer (the thread then holds none). 1 when the offer was for
/// `loop` and `job` (a task is its own job), else 0.
int bb_offer_take(const void *loop, const void *job);
/// Marks the calling thread as a loop's own thread (for the rest of its life).
void bb_mark_loop_thread(void);
/// 1 on a loop's own thread, else 0: such a thread never offers itself to another loop.
int bb_is_loop_thread(void);

/// Waits up to `timeout_ns` for `fd` to be readable, on the calling thread (a caller's thread
/// waiting for its own answer in place of the loop's), or for `wake_fd` (the loop's wake-up
/// descriptor: work came for the loop). 1: `fd` is readable; 2: its peer hung up or it failed;
/// 3: `wake_fd` is readable; 0: the time ran out; -1 with errno.
int bb_wait_readable(int fd, int wake_fd, int64_t timeout_ns);

/// Closes a descriptor made here.
int bb_close(int fd);

#endif
