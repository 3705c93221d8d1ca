extension ConnectionStateMachine {
    /// The actions one event of the machine produced, in order.
    ///
    /// Almost every event produces none, one or two actions (a result read: keep it; a request
    /// done: stop its deadline, answer its caller). Those are held inline, so the per-statement
    /// path allocates nothing for them; an array is used only from the third action on. It reads
    /// like an array, and compares with array literals in tests:
    ///
    /// ```swift
    /// var actions = ConnectionStateMachine.Actions()
    /// actions.append(.discard)
    /// actions.append(.resumeReading)      // still inline
    /// #expect(actions == [.discard, .resumeReading])
    /// ```
    ///
    /// Not generic on purpose: a generic list was not specialized on this path and went through
    /// value witnesses for every copy, which cost more than the arrays it replaced.
    struct Actions: RandomAccessCollection, ExpressibleByArrayLiteral, Equatable, CustomStringConvertible {
        typealias Element = Action

        private enum Storage {
            case none
            case one(Element)
            case two(Element, Element)
            case many([Element])
        }

        private var storage = Storage.none

        init() {}

        init(arrayLiteral elements: Element...) {
            append(contentsOf: elements)
        }

        var startIndex: Int { 0 }

        var endIndex: Int {
            switch storage {
            case .none: 0
            case .one: 1
            case .two: 2
            case .many(let elements): elements.count
            }
        }

        subscript(position: Int) -> Element {
            switch storage {
            case .one(let first) where position == 0: first
            case .two(let first, _) where position == 0: first
            case .two(_, let second) where position == 1: second
            case .many(let elements): elements[position]
            // Out of range: trap as an array does.
            default: Array(self)[position]
            }
        }

        mutating func append(_ element: Element) {
            switch storage {
            case .none:
                storage = .one(element)
            case .one(let first):
                storage = .two(first, element)
            case .two(let first, let second):
                storage = .many([first, second, element])
            case .many(var elements):
                storage = .none // leaves `elements` uniquely referenced: appended in place
                elements.append(element)
                storage = .many(elements)
            }
        }

        /// Appends `element` unless it is nil.
        mutating func append(_ element: Element?) {
            if let element { append(element) }
        }

        mutating func append(contentsOf elements: some Sequence<Element>) {
            for element in elements { append(element) }
        }

        static func + (lhs: Actions, rhs: Actions) -> Actions {
            var sum = lhs
            sum.append(contentsOf: rhs)
            return sum
        }

        static func == (lhs: Actions, rhs: Actions) -> Bool { lhs.elementsEqual(rhs) }

        var description: String { Array(self).description }
    }
}
