#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| doorbell_fuzzing::command::command_result(data));
