# The waveform's peaks (services/scoring/waveform_peaks.h), and the size of their JSON answer.
calleval_test(waveform_peaks_test SOURCES waveform_peaks_test.cc
              LIBS calleval_waveform_peaks calleval_json)
