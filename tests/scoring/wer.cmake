# Word error rate (services/scoring/word_error_rate.h): hand-computed cases and agreement with
# NIST sclite (Debian's sctk installs it outside PATH; without it that test is skipped).
calleval_test(word_error_rate_test SOURCES word_error_rate_test.cc LIBS calleval_word_error_rate)
find_program(CALLEVAL_SCLITE_BIN sclite PATHS /usr/lib/sctk/bin)
if(CALLEVAL_SCLITE_BIN)
  target_compile_definitions(word_error_rate_test PRIVATE CALLEVAL_SCLITE="${CALLEVAL_SCLITE_BIN}")
endif()
