//! Validation as work: `validation: {delay: D, work: cpu}` makes each message's validation take D of a
//! core's time computing (a hash over the message, again and again, on a blocking thread, until that
//! thread has run D), so that it costs what a signature or state check costs: the core is busy
//! meanwhile, and on a machine short of cores it takes longer than D, as a real check would. `work:
//! sleep` (the default) waits D instead, as Shadow's and gossipsub-interop's model of validation does.
//! Either way the message is reported Accepted to the behaviour afterwards (`validate_messages`), so it
//! is relayed, and delivered, only then.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use serde_json::Value;

#[derive(Clone, Copy, Debug, Default)]
pub struct Validation {
    pub delay: Duration,
    pub cpu: bool,
}

/// peerlab's `validation` parameter: rule accept (origins empty, max_size null: the planner passes
/// the whole model), `delay` seconds, `work` sleep or cpu.
pub fn read(value: &Value) -> Result<Validation, String> {
    let given =
        value.as_object().ok_or_else(|| format!("validation must be an object {{delay, work}}, not {value}"))?;
    let mut out = Validation::default();
    for (name, v) in given {
        match name.as_str() {
            "rule" if v == "accept" => {}
            "rule" => return Err(format!("validation.rule: accept only (the adapter accepts every message), not {v}")),
            "origins" if v.as_array().is_some_and(|a| a.is_empty()) => {}
            "max_size" if v.is_null() => {}
            "origins" | "max_size" => return Err(format!("validation.{name}: not with rule accept ({v})")),
            "delay" => {
                let s = v.as_f64().filter(|s| s.is_finite() && *s >= 0.0);
                out.delay =
                    Duration::from_secs_f64(s.ok_or_else(|| format!("validation.delay: seconds >= 0, not {v}"))?);
            }
            "work" if v == "sleep" => out.cpu = false,
            "work" if v == "cpu" => out.cpu = true,
            "work" => return Err(format!("validation.work: sleep or cpu, not {v}")),
            _ => return Err(format!("validation.{name}: it takes rule, delay and work")),
        }
    }
    Ok(out)
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Hashes `data` until this thread has had `d` of CPU time.
pub fn compute(d: Duration, data: &[u8]) {
    let start = thread_cpu();
    let mut h = DefaultHasher::new();
    data.hash(&mut h);
    while thread_cpu() - start < d {
        for _ in 0..256 {
            h.write_u64(std::hint::black_box(h.finish()));
        }
    }
}

/// Waits or computes, as `v` says, then returns.
pub async fn validate(v: Validation, data: Vec<u8>) {
    if v.cpu {
        let _ = tokio::task::spawn_blocking(move || compute(v.delay, &data)).await;
    } else {
        tokio::time::sleep(v.delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_delay_and_work_and_refuses_other_rules() {
        let v =
            read(&json!({"rule": "accept", "origins": [], "max_size": null, "delay": 0.005, "work": "cpu"})).unwrap();
        assert_eq!(v.delay, Duration::from_millis(5));
        assert!(v.cpu);
        assert!(!read(&json!({"delay": 0.1})).unwrap().cpu);
        assert!(read(&json!({"rule": "reject-origins"})).unwrap_err().contains("accept only"));
        assert!(read(&json!({"origins": ["n1"]})).unwrap_err().contains("not with rule accept"));
        assert!(read(&json!({"work": "gpu"})).unwrap_err().contains("sleep or cpu"));
    }

    #[test]
    fn compute_spends_the_threads_cpu_time() {
        let start = thread_cpu();
        compute(Duration::from_millis(30), b"message");
        let spent = thread_cpu() - start;
        assert!(spent >= Duration::from_millis(30) && spent < Duration::from_millis(60), "{spent:?}");
    }
}
