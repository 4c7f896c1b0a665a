# Voice activity detection: unit tests and the corpus evaluation tool (vad_eval).
if(TARGET calleval_voice_activity)
  calleval_test(voice_activity_test SOURCES voice_activity_test.cc LIBS calleval_voice_activity)

  add_executable(vad_eval vad_eval.cc)
  target_link_libraries(vad_eval PRIVATE calleval_voice_activity nlohmann_json::nlohmann_json)
  target_compile_definitions(vad_eval PRIVATE
    CALLEVAL_CORPUS_DIR="${CALLEVAL_TEST_CORPUS_DIR}")
endif()
