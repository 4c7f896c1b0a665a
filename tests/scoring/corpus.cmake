# The test corpus (tests/corpus, generated at build time) scored end to end against its truth.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
add_test(NAME corpus_score
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/score_corpus.sh $<TARGET_FILE:callevalctl>
          ${CMAKE_SOURCE_DIR}/tests/corpus/score.py ${CALLEVAL_TEST_CORPUS_DIR})
set_tests_properties(corpus_score PROPERTIES TIMEOUT 600)
# The real-speech calls (real_*) alone, against their acceptance targets (docs/testing.md).
add_test(NAME corpus_score_real_speech
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/score_corpus.sh $<TARGET_FILE:callevalctl>
          ${CMAKE_SOURCE_DIR}/tests/corpus/score.py ${CALLEVAL_TEST_CORPUS_DIR}
          --include real_* --latency-median-ms 10 --latency-p95-ms 40
          --silence-error-ms 40 --silence-error-percentile 100
          --wpm-within 3 --wpm-fraction 1 --voice-change-required)
set_tests_properties(corpus_score_real_speech PROPERTIES TIMEOUT 300)

# transcription_accuracy in `callevalctl analyze` (the embedded recognizer on a short call).
add_test(NAME analyze_transcribes
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/analyze_transcribes.sh $<TARGET_FILE:callevalctl>
          ${CALLEVAL_TEST_CORPUS_DIR})
set_tests_properties(analyze_transcribes PROPERTIES TIMEOUT 120)
