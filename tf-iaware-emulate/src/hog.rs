//! A co-tenant: threads that burn a fixed amount of CPU, duty-cycled in 10 ms periods.

use std::time::{Duration, Instant};

/// Length of one duty cycle.
const PERIOD: Duration = Duration::from_millis(10);

/// A co-tenant hog: burns `cores` CPUs (e.g. 0.3) until the process is killed: ⌈cores⌉
/// threads, each busy for `cores / ⌈cores⌉` of every 10 ms period.
pub fn burn(cores: f64) -> ! {
    let threads = cores.ceil().max(1.0) as usize;
    let duty = (cores / threads as f64).clamp(0.0, 1.0);
    for _ in 1..threads {
        std::thread::spawn(move || cycle(duty));
    }
    cycle(duty)
}

fn cycle(duty: f64) -> ! {
    let busy = PERIOD.mul_f64(duty);
    let mut x = 0u64;
    loop {
        let start = Instant::now();
        while start.elapsed() < busy {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        if let Some(rest) = PERIOD.checked_sub(start.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}
