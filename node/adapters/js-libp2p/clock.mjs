// The system clock in nanoseconds, for event times (both contracts: adapter.mjs, interop.mjs).
//
// performance.timeOrigin is taken at process start and was found 5 ms off under load (six nodes
// starting on two cores), so the monotonic clock is anchored here, at the instant Date.now() ticks
// over to a new millisecond; of three such anchors the one read soonest after its tick (the largest
// offset) is kept.
function clockAnchor () {
  let best = null
  for (let i = 0; i < 3; i++) {
    const start = Date.now()
    let ms
    while ((ms = Date.now()) === start) { /* until the next millisecond */ }
    const offset = BigInt(ms) * 1_000_000n - process.hrtime.bigint()
    if (best === null || offset > best) best = offset
  }
  return best
}
const anchor = clockAnchor()

/** Unix time in nanoseconds (a BigInt). */
export const nowNs = () => anchor + process.hrtime.bigint()

/** Unix time as RFC 3339 with nanoseconds, as go's slog writes it. */
export function rfc3339 () {
  const ns = nowNs()
  const fraction = (ns % 1_000_000_000n).toString().padStart(9, '0')
  return new Date(Number(ns / 1_000_000n)).toISOString().replace(/\.\d{3}Z$/, `.${fraction}Z`)
}
