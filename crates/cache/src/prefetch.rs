//! A hint to the processor to start loading memory a lookup will read soon. A server that
//! serves a batch of requests (a pipeline, or a proxying node's unit) looks up keys whose
//! index chains are cold; starting every key's loads before the first lookup overlaps their
//! cache misses instead of paying them one after another.

/// Starts loading the cache line at `ptr` into every cache level. Only a hint: any address
/// is allowed (a prefetch never faults), and where no prefetch instruction is available it
/// does nothing.
#[inline(always)]
pub fn prefetch_read<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and cannot fault, whatever the address;
    // SSE is part of x86-64's baseline.
    #[allow(unused_unsafe)]
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(ptr.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}
