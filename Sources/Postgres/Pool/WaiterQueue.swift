/// The pool's line of waiters: first in, first out, with removal from the front in constant
/// time (an array would shift every waiter behind the one served). Elements are addressed by
/// their place in line, 0 being the front. Removing from anywhere else (a cancelled waiter, a
/// deadline) shifts, which is rare.
struct WaiterQueue<Element> {
    private var storage: [Element] = []
    /// Where the line starts in `storage`; what is before it was served.
    private var head = 0

    var count: Int { storage.count - head }
    var isEmpty: Bool { head == storage.count }

    /// The waiters, front first.
    var elements: ArraySlice<Element> { storage[head...] }

    subscript(position: Int) -> Element {
        get { storage[head + position] }
        set { storage[head + position] = newValue }
    }

    mutating func append(_ element: Element) { storage.append(element) }

    @discardableResult
    mutating func remove(at position: Int) -> Element {
        guard position == 0 else { return storage.remove(at: head + position) }
        let element = storage[head]
        head += 1
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return element
    }

    func firstIndex(where predicate: (Element) -> Bool) -> Int? {
        storage[head...].firstIndex(where: predicate).map { $0 - head }
    }

    mutating func removeAll(where predicate: (Element) -> Bool) {
        storage.removeSubrange(..<head)
        head = 0
        storage.removeAll(where: predicate)
    }

    mutating func removeAll() {
        storage.removeAll()
        head = 0
    }
}

extension WaiterQueue: Sendable where Element: Sendable {}
