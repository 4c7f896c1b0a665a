# Tests of the streaming audio decoder (services/scoring/audio_decoder).
if(TARGET calleval_audio_decoder)
  calleval_test(audio_decoder_test SOURCES audio_decoder_test.cc LIBS calleval_audio_decoder)
  target_compile_definitions(audio_decoder_test PRIVATE
    CALLEVAL_CORPUS_DIR="${CMAKE_SOURCE_DIR}/../shared/corpus/calls")
endif()
