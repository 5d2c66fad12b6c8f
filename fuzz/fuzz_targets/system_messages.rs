#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| petrel::fuzzing::system_messages(data));
