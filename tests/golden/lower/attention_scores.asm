; fusion/attention_scores.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_matmul_mul_add_reduce_max_sub_and_3_more (class Rows { double: true })
; core function 0: units CubeTiles, tile 1, buffers [b0,b1,b2], workspace []
.kernel mm_fused_matmul_mul_add_reduce_max_sub_and_ aic
.gm a f32 [] in
.gm b f32 [] in
.gm c f32 [] out
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
.arg s7 0
.arg s8 0
.arg s9 0
.arg s10 0
.arg s11 0
.arg s12 0
.arg s13 0
.arg s14 0
.arg s15 0
.arg s16 0
.arg s17 0
.arg s18 0
.arg s19 0
.arg s20 0
.arg s21 0
.arg s22 0
.arg s23 0
.arg s24 0
.arg s25 0
.arg s26 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r13, 18
    ldarg r14, 19
    ldarg r15, 20
    add r16, r13, 63
    div r16, r16, 64
    max r16, r16, 1
    add r17, r15, 63
    div r17, r17, 64
    max r17, r17, 1
    add r18, r14, 63
    div r18, r18, 64
    mul r19, r13, r15
    mul r22, r15, 64
    ldarg r25, 21
    ldarg r20, 22
    ldarg r26, 23
    ldarg r27, 24
    ldarg r28, 25
    ldarg r21, 26
    ldarg r29, 27
    ldarg r30, 28
    mul r23, r26, 64
    mul r24, r29, 64
L25:
    bge r0, r1, L106
    rem r4, r0, r17
    div r12, r0, r17
    rem r3, r12, r16
    div r2, r12, r16
    mul r5, r3, -64
    add r5, r5, r13
    min r5, r5, 64
    mul r6, r4, -64
    add r6, r6, r15
    min r6, r6, 64
    mul r11, r2, r19
    mul r12, r3, r22
    add r11, r11, r12
    mul r12, r4, 64
    add r11, r11, r12
    movi r7, 0
    mul r8, r7, -64
    add r8, r8, r14
    min r8, r8, 64
    mul r9, r2, r20
    add r9, r9, r25
    mul r12, r3, r23
    add r9, r9, r12
    mul r12, r7, 64
    mul r12, r12, r27
    add r9, r9, r12
    mul r10, r2, r21
    add r10, r10, r28
    mul r12, r7, r24
    add r10, r10, r12
    mul r12, r4, 64
    mul r12, r12, r30
    add r10, r10, r12
    ldl1 f32, 64x64, r5, r8, @0x0, a, r9, r26
    ldl1 f32, 64x64, r8, r6, @0x4000, b, r10, r29
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f32, 64x64, @0x0, @0x0
    mvl0b f32, 64x64, @0x0, @0x4000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f32, 64x64x64, @0x0, @0x0, @0x0, 0
    barrier
    add r7, r7, 1
L70:
    bge r7, r18, L100
    mul r8, r7, -64
    add r8, r8, r14
    min r8, r8, 64
    mul r9, r2, r20
    add r9, r9, r25
    mul r12, r3, r23
    add r9, r9, r12
    mul r12, r7, 64
    mul r12, r12, r27
    add r9, r9, r12
    mul r10, r2, r21
    add r10, r10, r28
    mul r12, r7, r24
    add r10, r10, r12
    mul r12, r4, 64
    mul r12, r12, r30
    add r10, r10, r12
    ldl1 f32, 64x64, r5, r8, @0x0, a, r9, r26
    ldl1 f32, 64x64, r8, r6, @0x4000, b, r10, r29
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f32, 64x64, @0x0, @0x0
    mvl0b f32, 64x64, @0x0, @0x4000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f32, 64x64x64, @0x0, @0x0, @0x0, 1
    barrier
    add r7, r7, 1
    jmp L70
L100:
    setf m, fixp, 0
    waitf m, fixp, 0
    fixp f32, 64x64, r5, r6, c, r11, r15, @0x0, 0
    barrier
    add r0, r0, 1
    jmp L25
L106:
    end
; core function 1: units Kernel, tile 1, buffers [b2,b3,b4], workspace []
.kernel k_fused_matmul_mul_add_reduce_max_sub_and_ aiv
.gm b0_4 f32 [] inout
.gm b1_2 f32 [] inout
.gm b2_3 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
.arg s7 0
.arg s8 0
.arg s9 0
.arg s10 0
.arg s11 0
.arg s12 0
.arg s13 0
.arg s14 0
.arg s15 0
.arg s16 0
.arg s17 0
.arg s18 0
.arg s19 0
.arg s20 0
.arg s21 0
.arg s22 0
.arg s23 0
.arg s24 0
.arg s25 0
.arg s26 0
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L103
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 14
    ldarg r6, 15
    ldarg r7, 16
    mov r3, r0
    ldarg r31, 3
    max r31, r31, 1
    rem r4, r3, r31
    div r3, r3, r31
    ldarg r31, 6
    mul r31, r4, r31
    add r5, r5, r31
    ldarg r31, 9
    mul r31, r4, r31
    add r6, r6, r31
    ldarg r31, 12
    mul r31, r4, r31
    add r7, r7, r31
    ldarg r31, 5
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 11
    mul r31, r3, r31
    add r7, r7, r31
    waitf mte3, mte2, 0
    ld f32, 1x6128, 1, r2, @0x0, b0_4, r5, 0
    ld f32, 1x6128, 1, r2, @0x5fc0, b1_2, r6, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vdup f32, 1x6128, 1, r27, @0xbf80, 0.5
    vmul f32, 1x6128, 1, r27, @0x11f40, @0x0, @0xbf80
    vadd f32, 1x6128, 1, r27, @0xbf80, @0x11f40, @0x5fc0
    vrmax f32, 1x6128, 1, r2, @0x17f40, @0xbf80
    vbrow f32, 1x6128, 1, r27, @0x11f40, @0x17f40
    vsub f32, 1x6128, 1, r27, @0x5fc0, @0xbf80, @0x11f40
    vunary f32, 1x6128, 1, r27, @0x11f40, @0x5fc0, exp
    vrsum f32, 1x6128, 1, r2, @0x17f60, @0x11f40
    vbrow f32, 1x6128, 1, r27, @0x5fc0, @0x17f60
    vdiv f32, 1x6128, 1, r27, @0xbf80, @0x11f40, @0x5fc0
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x6128, 1, r2, b2_3, r7, 0, @0xbf80
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L103
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 14
    ldarg r6, 15
    ldarg r7, 16
    mov r3, r0
    ldarg r31, 3
    max r31, r31, 1
    rem r4, r3, r31
    div r3, r3, r31
    ldarg r31, 6
    mul r31, r4, r31
    add r5, r5, r31
    ldarg r31, 9
    mul r31, r4, r31
    add r6, r6, r31
    ldarg r31, 12
    mul r31, r4, r31
    add r7, r7, r31
    ldarg r31, 5
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 11
    mul r31, r3, r31
    add r7, r7, r31
    waitf mte3, mte2, 1
    ld f32, 1x6128, 1, r2, @0x18000, b0_4, r5, 0
    ld f32, 1x6128, 1, r2, @0x1dfc0, b1_2, r6, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vdup f32, 1x6128, 1, r27, @0x23f80, 0.5
    vmul f32, 1x6128, 1, r27, @0x29f40, @0x18000, @0x23f80
    vadd f32, 1x6128, 1, r27, @0x23f80, @0x29f40, @0x1dfc0
    vrmax f32, 1x6128, 1, r2, @0x2ff40, @0x23f80
    vbrow f32, 1x6128, 1, r27, @0x29f40, @0x2ff40
    vsub f32, 1x6128, 1, r27, @0x1dfc0, @0x23f80, @0x29f40
    vunary f32, 1x6128, 1, r27, @0x29f40, @0x1dfc0, exp
    vrsum f32, 1x6128, 1, r2, @0x2ff60, @0x29f40
    vbrow f32, 1x6128, 1, r27, @0x1dfc0, @0x2ff60
    vdiv f32, 1x6128, 1, r27, @0x23f80, @0x29f40, @0x1dfc0
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x6128, 1, r2, b2_3, r7, 0, @0x23f80
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L103:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
