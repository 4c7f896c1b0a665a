# Tests of the streaming audio decoder (services/scoring/audio_decoder).
if(TARGET calleval_audio_decoder)
  calleval_test(audio_decoder_test SOURCES audio_decoder_test.cc LIBS calleval_audio_decoder)
endif()
