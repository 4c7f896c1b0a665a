# The accuracy corpus (../shared/corpus beside the checkout) scored end to end.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
add_test(NAME corpus_score
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/score_corpus.sh $<TARGET_FILE:callevalctl>
          ${CMAKE_SOURCE_DIR}/../shared/corpus)
set_tests_properties(corpus_score PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)

# transcription_accuracy in `callevalctl analyze` (the embedded recognizer on a short call).
add_test(NAME analyze_transcribes
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/analyze_transcribes.sh $<TARGET_FILE:callevalctl>
          ${CMAKE_SOURCE_DIR}/../shared/corpus/calls)
set_tests_properties(analyze_transcribes PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
