//! `petrel::keep_large_buffers`: a freed large buffer stays in the heap for the next
//! message instead of being unmapped (glibc only).

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn a_freed_16_mib_buffer_stays_in_the_heap() {
    assert!(
        petrel::keep_large_buffers(),
        "mallopt refused the thresholds"
    );
    let size = 16 << 20;
    let buffer = vec![1u8; size];
    std::hint::black_box(&buffer);
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let mapped_while_live = unsafe { libc::mallinfo2() }.hblkhd;
    drop(buffer);
    let info = unsafe { libc::mallinfo2() };
    // Without the thresholds glibc serves 16 MiB with mmap (hblkhd) and unmaps it on free;
    // with them it comes from the heap and its pages stay there as free bytes.
    assert!(
        mapped_while_live < size,
        "the buffer was mmapped ({mapped_while_live} bytes in mapped blocks)"
    );
    assert!(
        info.fordblks >= size,
        "only {} free bytes left in the heap after freeing {size}",
        info.fordblks
    );
}
